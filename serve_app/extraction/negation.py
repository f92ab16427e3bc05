"""A memory that says the opposite of what the user said is not grounded.

"I love fish" and an extracted "The user does not eat fish" share the word the
lexical grounding step counts as support (``fish``), so that step keeps it. This check
compares *polarity*: a clause is negative when it holds an odd number of negating words
("not", "never", "don't", "no longer") or words of refusal, avoidance and giving up
("hates", "dislikes", "avoids", "allergic", "quit", "stopped", "gave up"). A memory is
*negated* when every one of its clauses that the user's statements talk about (shares a
content unit with a clause of a user turn) was said by the user with the other polarity
only. One agreeing clause anywhere keeps the memory, so a change of mind in the same
session ("I love fish. Actually, I don't eat fish any more") and mixed memories ("loves
fish and does not eat meat") are kept.

Only what the user states counts: questions ("Do you eat fish?") and the assistant's
turns neither support nor contradict ("Do you eat fish?" - "No." says nothing about
fish to a word count, so the memory is kept: a miss, never a false drop). What this
cannot see: a negation in other words ("I'm vegan" vs "eats cheese" share nothing) and
double meanings of a negating word; those are kept. Linear in the turns' characters
(each turn scanned up to a cap) and the memories; no regex.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from serve_app.extraction.grounding import STOPWORDS, Candidate, Limits, unit, words
from serve_app.extraction.parser import ExtractedMemory
from serve_app.extraction.turn import Turn

_NEGATING_TEXT = """
    not no never nor neither none nothing nobody nowhere without cannot
    dont doesnt didnt isnt arent wasnt werent cant wont wouldnt shouldnt couldnt
    havent hasnt hadnt mustnt neednt aint
    hate hates hated hating dislike dislikes disliked avoid avoids avoided avoiding
    refuse refuses refused quit quits quitting stop stops stopped stopping allergic
    allergy allergies intolerant intolerance unable"""
NEGATING = frozenset(_NEGATING_TEXT.split())
_GIVE = frozenset({"give", "gives", "gave", "given", "giving"})  # "gave up meat"
REASON = "negated"  # memserve_extraction_ungrounded_total{reason}
_CLAUSE_ENDS = ".!?;,\n"
_CLAUSE_WORDS = frozenset({"but", "and", "although", "though", "however", "whereas"})


@dataclass(frozen=True)
class Clause:
    units: frozenset[str]  # comparable content units (as grounding compares them)
    negative: bool
    question: bool = False


def _pieces(text: str) -> Iterable[tuple[str, bool]]:
    """(piece, is it part of a question) by a plain scan: pieces end at punctuation; a
    sentence's pieces are a question's when the sentence ends with "?"."""
    start = 0
    pending: list[str] = []
    for i, ch in enumerate(text):
        if ch not in _CLAUSE_ENDS:
            continue
        if ch in ".," and 0 < i < len(text) - 1 and text[i + 1].isdigit():
            continue  # 3.5, 10,000
        pending.append(text[start:i])
        start = i + 1
        if ch != ",":
            yield from ((p, ch == "?") for p in pending)
            pending = []
    pending.append(text[start:])
    yield from ((p, False) for p in pending)


def clauses(text: str, max_chars: int) -> list[Clause]:
    """The clauses of ``text`` (its first ``max_chars`` characters; "but", "and",
    "although" also start one), each with its content units and polarity."""
    out: list[Clause] = []
    for piece, question in _pieces(text[:max_chars]):
        buf: list[str] = []
        for w in [*words(piece, max_chars), ""]:
            if w and w not in _CLAUSE_WORDS:
                buf.append(w)
                continue
            if buf:
                units = frozenset(unit(x) for x in buf if x not in STOPWORDS)
                negative = _negations(buf) % 2 == 1
                out.append(Clause(units, negative, question))
            buf = []
    return out


def _negations(ws: Sequence[str]) -> int:
    """Negating words in a clause's words ("give up" counts as one)."""
    n = 0
    for i, w in enumerate(ws):
        if w in NEGATING or (w in _GIVE and i + 1 < len(ws) and ws[i + 1] == "up"):
            n += 1
    return n


@dataclass
class Polarity:
    """With which polarity the user's statements of a batch speak of each content unit."""

    by_unit: dict[str, set[bool]] = field(default_factory=dict)

    @classmethod
    def of_turns(cls, turns: Sequence[Turn], max_chars: int) -> Polarity:
        out = cls()
        for t in turns:
            if t.role != "user":
                continue
            for c in clauses(t.content, max_chars):
                if c.question:
                    continue
                for u in c.units:
                    out.by_unit.setdefault(u, set()).add(c.negative)
        return out

    def negated(self, item: Sequence[Clause]) -> bool:
        """Every clause of the item the user talked about was said with the other
        polarity only, and at least one was talked about."""
        talked = False
        for c in item:
            said: set[bool] = set()
            for u in c.units:
                said |= self.by_unit.get(u, set())
            if not said:
                continue
            if c.negative in said:
                return False
            talked = True
        return talked


def negated(
    turns: Sequence[Turn], memories: Sequence[ExtractedMemory], limits: Limits
) -> list[Candidate]:
    """The memories that say the opposite of what the user said (a thread's work: it
    scans every user turn), as candidates to drop with reason ``negated``."""
    if not memories:
        return []
    polarity = Polarity.of_turns(turns, limits.max_turn_chars)
    if not polarity.by_unit:
        return []
    return [
        Candidate("memory", i, m.content, m.content, REASON)
        for i, m in enumerate(memories)
        if m.content and polarity.negated(clauses(m.content, limits.max_turn_chars))
    ]


def without_negated(
    turns: Sequence[Turn], memories: list[ExtractedMemory], limits: Limits
) -> tuple[list[ExtractedMemory], list[Candidate]]:
    """(the memories kept, the negated ones dropped)."""
    drop = negated(turns, memories, limits)
    if not drop:
        return memories, []
    gone = {c.index for c in drop}
    return [m for i, m in enumerate(memories) if i not in gone], drop
