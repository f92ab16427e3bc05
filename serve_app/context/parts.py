"""A message read part by part (issue 29): sentences, questions and clauses.

"What city am I in? Any good bakeries around?" asks two things; searched as one text
the second drowns the first. Each part is searched on its own (all parts in one
backend call, so one encoder batch) and the results are fused by their best part.
The whole message stays a part too, so what it matched before still matches.

A plain scan, linear in the message: no regular expressions on request text.
"""

from __future__ import annotations

from serve_app.context.expand import key_terms
from serve_app.context.prefilter import is_greeting

_ENDS = ".?!;\n"
# Words that start a new intent inside a sentence ("..., and plan a trip").
_JOINERS = frozenset({"and", "but", "also", "plus", "then"})
MIN_PART_WORDS = 3  # a clause shorter than this stays with its neighbour


def sentences(text: str) -> list[str]:
    """Split at . ? ! ; and new lines (a dot inside a number or word does not end one)."""
    out: list[str] = []
    start = 0
    n = len(text)
    for i, ch in enumerate(text):
        if ch not in _ENDS:
            continue
        if ch == "." and i + 1 < n and not text[i + 1].isspace():
            continue  # 3.5, e.g., example.com
        part = text[start : i + 1].strip()
        if part:
            out.append(part)
        start = i + 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def clauses(sentence: str) -> list[str]:
    """Split a sentence before a joiner ("and", "but", "also", ...) that follows a comma,
    or before "and"/"but" when both sides have at least ``MIN_PART_WORDS`` words."""
    words = sentence.split()
    out: list[list[str]] = [[]]
    for i, w in enumerate(words):
        bare = w.lower().strip(",")
        after_comma = i > 0 and words[i - 1].endswith(",")
        rest = len(words) - i - 1
        if (
            bare in _JOINERS
            and len(out[-1]) >= MIN_PART_WORDS
            and rest >= MIN_PART_WORDS
            and (after_comma or bare in ("and", "but"))
        ):
            out.append([])
            continue
        out[-1].append(w)
    return [" ".join(c).strip(" ,") for c in out if c]


def split_parts(message: str, max_parts: int) -> list[str]:
    """The parts to search: the message, then its sentences/clauses that carry content
    words (greetings and fillers dropped), without repeats, at most ``max_parts``."""
    parts = [message]
    pieces = [c for s in sentences(message) for c in clauses(s)]
    if len(pieces) > 1:
        for p in pieces:
            if is_greeting(p) or not key_terms(p):
                continue
            if p not in parts:
                parts.append(p)
    return parts[:max_parts]


# Words of pleasantries: a message made only of these (beyond stop words) is small talk.
SMALL_TALK = frozenset(
    [
        "thanks",
        "thank",
        "thx",
        "helps",
        "helped",
        "helpful",
        "lot",
        "lots",
        "great",
        "awesome",
        "cool",
        "haha",
        "hahaha",
        "lol",
        "lmao",
        "nice",
        "perfect",
        "appreciate",
        "appreciated",
        "wow",
        "amazing",
        "fine",
        "morning",
        "evening",
        "afternoon",
        "night",
        "today",
        "weather",
        "isn't",
        "it's",
        "that's",
        "how's",
        "doing",
        "day",
        "cheers",
        "bye",
        "later",
        "yo",
        "hey",
        "hmm",
        "hello",
        "hi",
        "ok",
        "okay",
        "sure",
        "yeah",
        "yep",
        "good",
        "glad",
        "happy",
        "sounds",
    ]
)


def is_small_talk(message: str) -> bool:
    """A greeting, a thanks, or a message whose content words are all pleasantries."""
    if is_greeting(message):
        return True
    return all(
        is_greeting(s) or all(w in SMALL_TALK for w in key_terms(s, limit=64))
        for s in sentences(message) or [message]
    )
