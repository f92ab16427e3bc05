"""Junk guard: what must never be extracted again.

The service injects a memory block into system prompts (POST /v1/context, chat
proxy). If that block, a system prompt, or an assistant restating recalled
memories were fed back to extraction, memories would feed on themselves. The
context builder wraps its block with :func:`wrap_context`; extraction strips it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from serve_app.text import normalize

CONTEXT_OPEN = "<memserve-context>"
CONTEXT_CLOSE = "</memserve-context>"

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
MIN_CONTAINMENT_CHARS = 12  # shorter memories would match too much by containment


def wrap_context(text: str) -> str:
    """Mark an injected memory block so extraction can recognise and drop it."""
    return f"{CONTEXT_OPEN}\n{text}\n{CONTEXT_CLOSE}"


def strip_context(text: str) -> str:
    """Remove every injected block (an unclosed one runs to the end of the text).

    A scan with ``str.find``, linear: the pattern ``OPEN.*?CLOSE`` ran from every
    opening tag to the end of a text that never closes them (84 KB: 7 s).
    """
    kept: list[str] = []
    pos = 0
    while (start := text.find(CONTEXT_OPEN, pos)) != -1:
        kept.append(text[pos:start])
        end = text.find(CONTEXT_CLOSE, start + len(CONTEXT_OPEN))
        pos = len(text) if end == -1 else end + len(CONTEXT_CLOSE)
    kept.append(text[pos:])
    return " ".join(kept).strip()


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


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


@dataclass
class Turn:
    """One conversation message as extraction sees it."""

    role: str
    content: str
    turn_index: int = 0
    occurred_at: datetime | None = None  # when it was said (the prompt shows the day)
    name: str | None = None  # the message's ``name`` (who said it, as the platform shows)
    speaker_id: str | None = None  # the tenant's user who said it (a group session)


def turn_of(row: dict[str, Any]) -> Turn:
    """A ``session_turns`` row as extraction sees it."""
    return Turn(
        row["role"],
        row["content"],
        row["turn_index"],
        row.get("occurred_at"),
        row.get("speaker_name"),
        row.get("speaker_id"),
    )


def said_at(rows: Sequence[dict[str, Any]]) -> datetime | None:
    """When the newest turn of a batch was said: the event time (``valid_from``) of what
    extraction takes from it, unless the model dates an item itself."""
    return max((r["occurred_at"] for r in rows if r.get("occurred_at")), default=None)


# Acknowledgements that carry nothing to remember (compared after normalising).
_ACKS = frozenset({
    "ok", "okay", "k", "kk", "sure", "yes", "yep", "yeah", "no", "nope", "thanks", "thx",
    "ty", "thank you", "thanks a lot", "thank you very much", "ok thanks", "okay thanks",
    "ok thank you", "cool", "great", "nice", "perfect", "got it", "alright", "fine", "lol",
    "haha", "hmm", "hi", "hello", "hey", "bye", "goodbye", "good morning", "good night",
    "sounds good",
})  # fmt: skip


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
