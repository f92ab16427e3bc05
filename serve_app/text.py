"""Text normalisation shared by dedup and validation."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = re.compile(r"^[\W_]+|[\W_]+$")


def normalize(text: str) -> str:
    """Case-, width- and whitespace-insensitive form, trailing punctuation dropped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _SPACE.sub(" ", text).strip()
    return _EDGE_PUNCT.sub("", text)


def dedupe_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()


# ---------------------------------------------------------------- entities

# Capitalised words that start sentences or questions without naming anything.
_NOT_NAMES_WORDS = """
    a about after all also an and any are as at be because before but by can could did do
    does for from had has have he her here hers him his how i if in is it its just let like me
    my no not now of oh ok okay on or our she so some than that the their them then there these
    they this those to too up us was we were what when where which while who whom whose why will
    with would yes you your yours yeah yep hey hi hello wow thanks thank sure well great cool
    nice good awesome amazing congrats congratulations sorry sounds really totally absolutely
    definitely glad love haha lol bye see take dear please maybe anyway alright right
    true"""
_NOT_NAMES = frozenset(_NOT_NAMES_WORDS.split())
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_POSSESSIVE = re.compile(r"['’]s?$")
_SENTENCE_END = frozenset('.!?:;"“(\n')


def entity_candidates(text: str) -> list[tuple[str, bool]]:
    """Proper-noun candidates of ``text``: (normalised name, seen only sentence-initially).

    A candidate is a run of capitalised words (``Caroline``, ``Becoming Nicole``,
    ``LGBTQ``) with possessives and leading function words dropped; each word of a
    multi-word run is a candidate too, so "Nicole" meets "Becoming Nicole". A word
    that only ever starts a sentence may be an ordinary word ("Painting is fun"):
    the flag lets the caller keep it only where the same name occurs mid-sentence
    elsewhere (see :class:`serve_app.retrieval.signals.EntityIndex`). No LLM, no model.
    """
    spans: list[tuple[list[str], bool]] = []
    run: list[str] = []
    run_initial = False
    last_end = 0
    for m in _WORD.finditer(text):
        word = _POSSESSIVE.sub("", m.group())
        gap = text[last_end : m.start()]
        before = text[: m.start()].rstrip()
        initial = not before or before[-1] in _SENTENCE_END
        adjacent = bool(run) and gap.strip() == ""
        if word[:1].isupper() and (word.lower() not in _NOT_NAMES or adjacent):
            if not adjacent:
                if run:
                    spans.append((run, run_initial))
                run, run_initial = [], initial
            run.append(word)
        elif run:
            spans.append((run, run_initial))
            run = []
        last_end = m.end()
        if m.group() != word and run:  # a possessive ends the name
            spans.append((run, run_initial))
            run = []
    if run:
        spans.append((run, run_initial))
    out: dict[str, bool] = {}
    for words, initial in spans:
        names = [" ".join(words)] + (words if len(words) > 1 else [])
        for i, name in enumerate(names):
            key = name.casefold()
            if key in _NOT_NAMES or len(key) < 2:
                continue
            only_initial = initial and (len(words) == 1 or i == 1)
            out[key] = out.get(key, True) and only_initial
    return list(out.items())
