"""Evidence that a retrieved item is relevant to this message (issue 29, "no noise").

Ranking signals such as a neighbour boost or an expansion bonus move an item up a
list that is cut anyway; they say nothing about whether the item helps with this
message ("Lives in Oslo near the fjord" ranked second for "green tea" on a neighbour
boost with cosine -0.001). So an item is admitted only on its own evidence:

- **similar**: its cosine to one of the message's parts is at least ``strong`` and
  within ``margin`` of the best candidate's for this message (what lies well below
  the best match is the topic's neighbourhood, not the answer: "Won the club's
  doubles tennis tournament" at 0.41 beside "Plays tennis at the club" at 0.54 for
  "How do I improve my tennis serve?"), or
- **shared words**: it shares at least ``min_shared`` content words with the message
  and its cosine is at least ``weak`` (dialogue turns and short notes match a
  question by their words, a name and a topic, more than by their embedding: LoCoMo
  evidence often sits at cosine 0.2-0.35). Words that only say *when* ("weekend",
  "Saturday", "last") are no evidence of what an item is about, so they are not
  counted (``ignore_time_words``).

Every threshold is a setting (``MEMSERVE_CONTEXT_EVIDENCE_*``), calibrated on
loadtests/bench_context.py (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from serve_app.context.expand import STOPWORDS
from serve_app.profile.classify import words

STEM = 5  # "bakeries"/"bakery", "allergic"/"allergy": the same first five letters
_TIME_WORDS = """
    monday tuesday wednesday thursday friday saturday sunday weekend weekends weekday
    weekdays today tonight tomorrow yesterday morning mornings evening evenings night
    nights afternoon week weeks month months year years daily weekly monthly yearly
    last next ago
    """
TIME_STEMS = frozenset(w[:STEM] for w in _TIME_WORDS.split())


def stems(text: str) -> frozenset[str]:
    """Content-word stems of ``text`` (stop words and words under 3 letters dropped)."""
    return frozenset(w[:STEM] for w in words(text) if len(w) >= 3 and w not in STOPWORDS)


def _cosine(similarity: float | None) -> float:
    return float(similarity) if similarity is not None else -1.0


@dataclass(frozen=True)
class Evidence:
    """The admission rule's thresholds (see the module docstring). The dataclass
    defaults turn the margin, the shared-word count and the time words off (the rule
    before them); the calibrated values are ``ContextSettings``'s."""

    strong: float
    weak: float
    margin: float = 2.0  # >= 2: off (cosines lie in [-1, 1])
    min_shared: int = 1
    ignore_time_words: bool = False

    def shared(self, item_stems: frozenset[str], message: frozenset[str]) -> frozenset[str]:
        """The content-word stems that count as shared evidence."""
        both = item_stems & message
        return both - TIME_STEMS if self.ignore_time_words else both

    def why(
        self,
        similarity: float | None,
        item_stems: frozenset[str],
        message: frozenset[str],
        best: float | None = None,
    ) -> str | None:
        """A reason to admit the item ("similar to the message (cosine 0.52)", "shares
        'bakery'..."), or None. ``best``: the best cosine among this message's
        candidates (None: the item's own, i.e. no margin)."""
        sim = _cosine(similarity)
        near_best = best is None or sim >= best - self.margin
        if sim >= self.strong and near_best:
            return f"similar to the message (cosine {sim:.2f})"
        shared = self.shared(item_stems, message)
        if len(shared) >= self.min_shared and sim >= self.weak:
            return f"shares {_quote(shared)} with the message (cosine {sim:.2f})"
        return None

    def admit(
        self, candidates: Sequence[tuple[float | None, frozenset[str]]], message: frozenset[str]
    ) -> list[str | None]:
        """The reason (or None) for each (cosine, stems) candidate of one message; the
        margin is taken against the best cosine among them. One pass, linear."""
        best = max((_cosine(s) for s, _ in candidates), default=-1.0)
        return [self.why(s, st, message, best) for s, st in candidates]


def _quote(shared: Iterable[str]) -> str:
    return ", ".join(f"'{s}'" for s in sorted(shared)[:3])
