"""Junk guard: what must never be extracted again.

The service injects a memory block into system prompts (POST /v1/context, chat
proxy). If that block, a system prompt, or an assistant restating recalled
memories were fed back to extraction, memories would feed on themselves. The
context builder wraps its block (``serve_app.text.wrap_context``); extraction strips it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from serve_app.extraction.turn import Turn
from serve_app.text import normalize, strip_context

MIN_CONTAINMENT_CHARS = 12  # shorter memories would match too much by containment


def normal_forms(memories: Iterable[str]) -> list[str]:
    """The memories' normal forms that are long enough to count for :func:`restates`;
    computed once per batch, not once per sentence (sentences x memories normalisations)."""
    return [n for n in map(normalize, memories) if len(n) >= MIN_CONTAINMENT_CHARS]


def restates(sentence: str, forms: Sequence[str]) -> bool:
    """Normalised containment either way (a restatement quotes or paraphrases little),
    against ``forms`` from :func:`normal_forms`."""
    s = normalize(sentence)
    if not s:
        return True
    return any(n in s or (len(s) >= MIN_CONTAINMENT_CHARS and s in n) for n in forms)


def contained(sentence: str, memories: Iterable[str]) -> bool:
    """:func:`restates` for one sentence against raw memory texts."""
    return restates(sentence, normal_forms(memories))


# Acknowledgements that carry nothing to remember (compared after normalising).
_ACKS = frozenset(
    {
        "ok",
        "okay",
        "k",
        "kk",
        "sure",
        "yes",
        "yep",
        "yeah",
        "no",
        "nope",
        "thanks",
        "thx",
        "ty",
        "thank you",
        "thanks a lot",
        "thank you very much",
        "ok thanks",
        "okay thanks",
        "ok thank you",
        "cool",
        "great",
        "nice",
        "perfect",
        "got it",
        "alright",
        "fine",
        "lol",
        "haha",
        "hmm",
        "hi",
        "hello",
        "hey",
        "bye",
        "goodbye",
        "good morning",
        "good night",
        "sounds good",
    }
)


def substantive(text: str) -> bool:
    """Whether a user turn may hold something to remember: not an acknowledgement
    ("ok thanks!") and not only punctuation or emoji. Linear in the text."""
    norm = normalize(text)
    return any(ch.isalnum() for ch in norm) and norm not in _ACKS


def clean_turns(turns: Sequence[Turn]) -> list[Turn]:
    """Drop system turns and injected context blocks; empty turns disappear."""
    out: list[Turn] = []
    for t in turns:
        if t.role == "system":
            continue
        content = strip_context(t.content)
        if content:
            out.append(replace(t, content=content))
    return out
