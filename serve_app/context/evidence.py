"""Evidence that a retrieved item is relevant to this message (issue 29, "no noise").

Ranking signals such as a neighbour boost or an expansion bonus move an item up a
list that is cut anyway; they say nothing about whether the item helps with this
message ("Lives in Oslo near the fjord" ranked second for "green tea" on a neighbour
boost with cosine -0.001). So an item is admitted only on its own evidence:

- its cosine to one of the message's parts is at least ``strong`` (paraphrase), or
- it shares a content word with the message and its cosine is at least ``weak``.

Both thresholds are calibrated on loadtests/bench_context.py (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from serve_app.context.expand import STOPWORDS
from serve_app.profile.classify import words

STEM = 5  # "bakeries"/"bakery", "allergic"/"allergy": the same first five letters


def stems(text: str) -> frozenset[str]:
    """Content-word stems of ``text`` (stop words and words under 3 letters dropped)."""
    return frozenset(w[:STEM] for w in words(text) if len(w) >= 3 and w not in STOPWORDS)


@dataclass(frozen=True)
class Evidence:
    strong: float
    weak: float

    def why(self, similarity: float | None, item_stems: frozenset[str], message: frozenset[str]):
        """A reason to admit the item ("similarity 0.52", "shares 'bakery'..."), or None."""
        sim = float(similarity) if similarity is not None else -1.0
        if sim >= self.strong:
            return f"similar to the message (cosine {sim:.2f})"
        shared = item_stems & message
        if shared and sim >= self.weak:
            return f"shares {_quote(shared)} with the message (cosine {sim:.2f})"
        return None


def _quote(shared: Iterable[str]) -> str:
    return ", ".join(f"'{s}'" for s in sorted(shared)[:3])
