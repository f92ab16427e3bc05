"""Calibrating the evidence gate (issue 29) on bench_context's calibration half.

Blocks are taken with the gate off (profile and parts on), so every candidate the
search returns is seen with its best cosine to a part; the gate is then replayed for
a grid of (strong, weak) thresholds with the same rule as serve_app/context/evidence.py.
The pick: the highest retrieved-section recall of needed items, then the lowest
unneeded share, among pairs whose unneeded share is <= ``max_unneeded``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from serve_app.context.evidence import Evidence, stems

STRONG = (0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
WEAK = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35)


@dataclass
class Candidate:
    key: str  # the item's label key (user-qualified), "" when unlabelled
    similarity: float | None
    content: str


@dataclass
class Sample:
    message: str
    needed: frozenset[str]
    candidates: Sequence[Candidate]


def replay(samples: Sequence[Sample], strong: float, weak: float) -> dict[str, float]:
    ev = Evidence(strong, weak)
    kept = found = 0
    unneeded = 0
    needed_seen = 0
    for s in samples:
        msg = stems(s.message)
        needed_seen += sum(1 for c in s.candidates if c.key in s.needed)
        for c in s.candidates:
            if ev.why(c.similarity, stems(c.content), msg) is None:
                continue
            kept += 1
            if c.key in s.needed:
                found += 1
            else:
                unneeded += 1
    return {
        "strong": strong,
        "weak": weak,
        "kept": kept,
        "needed_kept_share": round(found / needed_seen, 3) if needed_seen else 1.0,
        "unneeded_share": round(unneeded / kept, 3) if kept else 0.0,
    }


def calibrate(samples: Sequence[Sample], max_unneeded: float = 0.15) -> dict:
    grid = [replay(samples, a, b) for a in STRONG for b in WEAK if b <= a]
    ok = [g for g in grid if g["unneeded_share"] <= max_unneeded] or grid
    best = max(ok, key=lambda g: (g["needed_kept_share"], -g["unneeded_share"]))
    return {"pick": best, "grid": grid}
