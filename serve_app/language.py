"""Whether the embedding model reads a message's language.

The default model (all-MiniLM-L6-v2) was trained on English: a message in Portuguese or
Swahili gets cosines that say nothing about its meaning, and a gate on cosine lets
unrelated memories in. py3langid (its model ships in the wheel: nothing is downloaded)
names the language; a message is unread when it names another language with
confidence. Short or mixed texts ("ok cool", "thanks!") give low confidence and stay
read: they are judged as before.
"""

from __future__ import annotations

from functools import lru_cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

READ = frozenset({"en"})  # the languages the model reads
CONFIDENCE = 0.5  # below this the identifier is guessing (short texts)
MAX_CHARS = 2000  # enough to name a language; the scan stays bounded


def load() -> None:
    """Load the identifier now (about 0.8 s of CPU): start-up work, so the first message
    does not pay it on the event loop (the composition root runs it in a thread)."""
    _identifier()


@lru_cache(maxsize=1)
def _identifier() -> LanguageIdentifier:
    """Loaded once per process, by :func:`load` at start-up (else on first use)."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def language(text: str) -> tuple[str, float]:
    """(ISO 639-1 code, confidence 0..1) of ``text``'s first ``MAX_CHARS`` characters;
    linear in them (byte n-gram counts)."""
    lang, confidence = _identifier().classify(text[:MAX_CHARS])
    return str(lang), float(confidence)


def model_reads(text: str) -> bool:
    """False when ``text`` is, with confidence, in a language the model does not read."""
    lang, confidence = language(text)
    return lang in READ or confidence < CONFIDENCE
