"""Grounded extraction: drop what the model copied from the known block, not from the turns.

The extraction prompt shows what is already stored ("Known about this user", see
:mod:`serve_app.extraction.reconcile`). A real model re-asserted values from
that block as new facts on the very day the user changed them ("diet = vegetarian"
stored again, dated the day the user said "pescatarian now"): the store then held the
stale value as the newest one. This check drops such items before they are written
and counts them (``memserve_extraction_ungrounded_total{kind, reason}``).

An item is *ungrounded* when its words come from the known block and not from the new
turns. Decided in two cheap, deterministic steps, per memory content or fact value:

1. Lexical, always. ``V``: the item's content words (case-folded, NFKC, stop words out,
   Snowball-stemmed, hyphenated names such as ``Berlin-1234`` kept whole, digit groups
   joined). A word is *supported* when the turns hold it (a date written as a date, a
   month or weekday name, is supported when the turns carry any time cue: a weekday, a
   month, "next", "ago", a number, or the turn's own day, since the prompt asks the
   model to resolve relative dates). The item is flagged only when no word of it is
   supported and at least ``ground_copied_share`` of its words are in the known block.
   A fact is judged on its value alone ("diet = vegetarian": ``vegetarian``).
2. Embedding, only for items step 1 flags (rare; nothing runs when none is): one encoder
   batch of the flagged items, the turns' sentences and the known items. The item is
   dropped when it is closer to a known item than to every turn sentence by at least
   ``ground_margin`` (cosine): it restates the known row, not what was just said.

What this cannot see: an item that shares a word with the turns is kept, so a negation
that names the old value ("Alex and I split up" then "The user is dating Alex" again,
"I sold my Civic" then "car = Civic") keeps it; to a word count a confirmation ("blue,
definitely" then "Blue is the user's favourite colour") looks the same, and dropping
confirmations would be false drops. Those are the reconcile step's (UPDATE/INVALIDATE).
An item unsupported by both turns and known block (a hallucination, a far inference)
is not this check's business and is kept. A memory that says the opposite of what the
user said ("does not eat fish" after "I love fish") is serve_app/extraction/negation.py's
(reason ``negated``). Work is linear in the turns' characters
(each turn scanned up to a cap) and the number of items; no regex.
"""

from __future__ import annotations

import asyncio
import threading
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import snowballstemmer

from serve_app.extraction.dates import MONTHS, WEEKDAYS, parse_when
from serve_app.extraction.parser import ExtractedFact, ExtractedMemory
from serve_app.extraction.reconcile import Known, Shown
from serve_app.extraction.turn import Turn
from serve_app.settings.jobs import ExtractSettings
from serve_app.text import sentences

_STOPWORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just let me more most my myself no nor not of off on once only or other our
    ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    im ive id ill youre dont doesnt didnt cant wont isnt arent also really yes ok okay
    user users now currently still true false none unknown n/a"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
TIME_CUES = frozenset(
    {
        *WEEKDAYS,
        *MONTHS,
        "yesterday",
        "today",
        "tomorrow",
        "tonight",
        "last",
        "next",
        "ago",
        "week",
        "weeks",
        "weekend",
        "month",
        "months",
        "year",
        "years",
        "day",
        "days",
        "morning",
        "evening",
        "afternoon",
        "since",
        "until",
        "later",
        "earlier",
        "soon",
    }
)
MAX_WORD_CHARS = 40  # a longer "word" is not one; it is cut (linear either way)
_JOINERS = "-'’"
_LOCAL = threading.local()  # a Snowball stemmer keeps state per call: one per thread

# Labels of memserve_extraction_ungrounded_total (bounded: kind x reason).
KINDS = ("memory", "fact")
REASON = "copied_known"


@lru_cache(maxsize=16384)
def _stem(word: str) -> str:
    if word.isdigit():
        return word
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


_STEMMED_CUES = frozenset(_stem(w) for w in (*WEEKDAYS, *MONTHS))


def words(text: str, max_chars: int) -> list[str]:
    """Lower-case words of ``text`` (its first ``max_chars`` characters): runs of letters
    and digits, joined across an inner hyphen or apostrophe ("berlin-1234", "o'neil"),
    "'s" dropped, digit groups joined across "," and "." ("10,000" -> "10000")."""
    text = unicodedata.normalize("NFKC", text[:max_chars]).casefold()
    out: list[str] = []
    buf: list[str] = []
    n = len(text)
    for i, ch in enumerate(text):
        if ch.isalnum():
            if len(buf) < MAX_WORD_CHARS:
                buf.append(ch)
            continue
        nxt = text[i + 1] if i + 1 < n else ""
        if buf and nxt.isalnum():
            if ch in _JOINERS and not (
                ch != "-" and nxt == "s" and not text[i + 2 : i + 3].isalnum()
            ):
                buf.append("-" if ch == "-" else "")
                continue
            if ch in ",." and buf[-1].isdigit() and nxt.isdigit():
                continue
        if buf:
            out.append("".join(buf))
            buf = []
    if buf:
        out.append("".join(buf))
    return [w for w in out if len(w) > 1 or w.isdigit()]


def unit(word: str) -> str:
    """A word's comparable form: each hyphen part stemmed (a date stays as written)."""
    if "-" in word and parse_when(word) is not None:
        return word
    return "-".join(_stem(p) for p in word.split("-") if p)


@dataclass
class Evidence:
    """What a text set says, as comparable units and their parts, with its time cues."""

    units: set[str] = field(default_factory=set)
    parts: set[str] = field(default_factory=set)
    time_cue: bool = False

    def add(self, text: str, max_chars: int) -> None:
        for w in words(text, max_chars):
            if w in TIME_CUES or w.isdigit():
                self.time_cue = True
            if w in STOPWORDS:
                continue
            u = unit(w)
            self.units.add(u)
            self.parts.update(u.split("-"))

    def holds(self, unit: str) -> bool:
        """The unit itself, or every part of a compound ("gluten free" holds "gluten-free")."""
        if unit in self.units:
            return True
        parts = unit.split("-")
        return len(parts) > 1 and all(p in self.parts for p in parts)


def content_units(text: str, max_chars: int) -> list[str]:
    """The comparable content units of a candidate, once each, in order."""
    seen: dict[str, None] = {}
    for w in words(text, max_chars):
        if w not in STOPWORDS:
            seen.setdefault(unit(w), None)
    return list(seen)


@dataclass(frozen=True)
class Limits:
    copied_share: float = 0.5  # of a candidate's units: unsupported and in the known block
    margin: float = 0.05  # cosine: closer to a known item than to any turn sentence by this
    max_turn_chars: int = 12_000  # of each turn scanned (the prompt truncates turns too)
    max_sentences: int = 256  # turn sentences embedded for the second step

    @classmethod
    def from_settings(cls, s: ExtractSettings) -> Limits:
        return cls(
            s.ground_copied_share, s.ground_margin, s.max_turn_tokens * 8, s.ground_max_sentences
        )


@dataclass(frozen=True)
class Candidate:
    """One item to check: a memory's content or a fact's value (``text`` is what is
    embedded: the content, or ``key: value``)."""

    kind: str  # memory | fact
    index: int  # position in its own list
    value: str
    text: str
    reason: str = REASON  # copied_known, or negated (serve_app/extraction/negation.py)


def is_date(unit: str) -> bool:
    """A written date ("2026-04-03"); a bare number (a year, a model year) is not one."""
    return unit[:1].isdigit() and "-" in unit and parse_when(unit) is not None


class Grounding:
    """The check for one batch: the turns it was given and the known block it was shown."""

    def __init__(self, turns: Sequence[Turn], known: Known, limits: Limits) -> None:
        self.limits = limits
        self.turns = Evidence()
        self.known = Evidence()
        self.days: set[str] = set()
        for t in turns:
            self.turns.add(t.content, limits.max_turn_chars)
            if t.occurred_at is not None:
                self.days.add(t.occurred_at.date().isoformat())
        self.items: list[Shown] = list(known.items.values())
        for s in self.items:
            self.known.add(s.content, limits.max_turn_chars)
        self.turn_texts = [t.content[: limits.max_turn_chars] for t in turns]

    def supported(self, unit: str) -> bool:
        """In the turns; a date or a month/weekday name also on any time cue in them
        (the model resolves "next Friday" against the turn's day)."""
        if unit in self.turns.units or unit in self.days:
            return True
        if is_date(unit) or unit in _STEMMED_CUES:
            return self.turns.time_cue
        return self.turns.holds(unit)

    def suspect(self, value: str) -> bool:
        """Step 1: none of the candidate's words is in the turns, and at least
        ``copied_share`` of them are in the known block."""
        units = content_units(value, self.limits.max_turn_chars)
        if not units or not self.items:
            return False
        if any(self.supported(u) for u in units):
            return False  # the turns talk about it (a paraphrase, a confirmation, a change)
        copied = sum(1 for u in units if self.known.holds(u))
        return copied > 0 and copied >= self.limits.copied_share * len(units)

    def sentences(self) -> list[str]:
        out: list[str] = []
        for text in self.turn_texts:
            for s in sentences(text):
                out.append(s)
                if len(out) >= self.limits.max_sentences:
                    return out
        return out


Embed = Callable[..., Awaitable[np.ndarray]]


def candidates(
    memories: Sequence[ExtractedMemory], facts: Sequence[ExtractedFact]
) -> list[Candidate]:
    """Every item that writes a value (ADD/UPDATE content, every fact)."""
    out = [
        Candidate("memory", i, m.content, m.content) for i, m in enumerate(memories) if m.content
    ]
    out += [
        Candidate("fact", i, f.value, f"{f.key.replace('_', ' ')}: {f.value}")
        for i, f in enumerate(facts)
    ]
    return out


def known_text(s: Shown) -> str:
    return f"{s.key.replace('_', ' ')}: {s.content}" if s.kind == "fact" else s.content


def _lexical(
    turns: Sequence[Turn],
    known: Known,
    memories: Sequence[ExtractedMemory],
    facts: Sequence[ExtractedFact],
    limits: Limits,
) -> tuple[list[Candidate], list[str], list[str]]:
    """Step 1 (a thread: it scans every turn): the flagged candidates, and for step 2
    the turns' sentences and the known items' texts."""
    check = Grounding(turns, known, limits)
    flagged = [c for c in candidates(memories, facts) if check.suspect(c.value)]
    if not flagged:
        return [], [], []
    return flagged, check.sentences(), [known_text(s) for s in check.items]


async def ungrounded(
    turns: Sequence[Turn],
    known: Known,
    memories: Sequence[ExtractedMemory],
    facts: Sequence[ExtractedFact],
    embed: Embed,
    limits: Limits,
) -> list[Candidate]:
    """The candidates to drop (step 1 then step 2); [] when nothing was shown."""
    if not known:
        return []
    flagged, said, shown = await asyncio.to_thread(_lexical, turns, known, memories, facts, limits)
    if not flagged:
        return []
    if not said:
        return flagged
    texts = [c.text for c in flagged] + said + shown
    vectors = np.asarray(await embed(texts, is_query=False), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)
    mine = vectors[: len(flagged)]
    to_turns = mine @ vectors[len(flagged) : len(flagged) + len(said)].T
    to_known = mine @ vectors[len(flagged) + len(said) :].T
    return [
        c
        for c, t, k in zip(flagged, to_turns.max(axis=1), to_known.max(axis=1), strict=True)
        if float(k) - float(t) >= limits.margin
    ]


async def grounded(
    turns: Sequence[Turn],
    known: Known,
    memories: list[ExtractedMemory],
    facts: list[ExtractedFact],
    embed: Embed,
    limits: Limits,
) -> tuple[list[ExtractedMemory], list[ExtractedFact], list[Candidate]]:
    """(memories kept, facts kept, the candidates dropped)."""
    drop = await ungrounded(turns, known, memories, facts, embed, limits)
    if not drop:
        return memories, facts, []
    gone = {(c.kind, c.index) for c in drop}
    return (
        [m for i, m in enumerate(memories) if ("memory", i) not in gone],
        [f for i, f in enumerate(facts) if ("fact", i) not in gone],
        drop,
    )
