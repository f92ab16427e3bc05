"""Calibrating the evidence gate (issue 29) on bench_context's calibration half.

Blocks are taken with the gate off (profile and parts on), so every candidate the
search returns is seen with its best cosine to a part (logged per item in the JSON,
with its cosine to the parts without their time words: ``topic``); the gate is then
replayed for a grid of its thresholds (strong, weak, margin to the best candidate,
shared words, time words ignored, time-free similarity) with the rule of
serve_app/context/evidence.py itself. The pick: among rules whose unneeded share is
<= ``max_unneeded`` on the calibration half, the highest share of needed candidates
kept, then the lowest unneeded share, then the loosest rule (the most LoCoMo-like
evidence kept), then the time-free rule (``time_free``: on the calibration half it
ties with the plain one, so it is chosen by its cause, not by this replay; the
held-out half and LoCoMo show what it does). The pick is replayed on the held-out
half and on LoCoMo dev (not tuned on) to show whether it overfits.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from serve_app.context.evidence import Evidence, stems

STRONG = (0.35, 0.4, 0.45, 0.5, 0.55)
WEAK = (0.15, 0.2, 0.25, 0.3, 0.35)
MARGIN = (2.0, 0.3, 0.2, 0.15, 0.1, 0.05)
MIN_SHARED = (1, 2)
TIME_WORDS = (False, True)
TIME_FREE = (False, True)


@dataclass
class Candidate:
    key: str  # the item's label key (user-qualified), "" when unlabelled
    similarity: float | None
    content: str
    score: float | None = None
    topic: float | None = None  # cosine to the parts without time words (None: none)


@dataclass
class Sample:
    message: str
    needed: frozenset[str]
    candidates: Sequence[Candidate]
    half: str = "calibration"  # calibration | held_out | locomo
    source: str = ""
    fixed: frozenset[str] = field(default_factory=frozenset)  # in the block anyway (profile)

    def __post_init__(self) -> None:  # from JSON: lists and dicts
        self.needed = frozenset(self.needed)
        self.fixed = frozenset(self.fixed)
        self.candidates = [
            c if isinstance(c, Candidate) else Candidate(**c) for c in self.candidates
        ]


def as_json(s: Sample) -> dict:
    """A sample for the report (sets as sorted lists, so it reads back)."""
    return asdict(s) | {"needed": sorted(s.needed), "fixed": sorted(s.fixed)}


def kept(s: Sample, ev: Evidence) -> list[Candidate]:
    msg = stems(s.message)
    cands = [(c.similarity, stems(c.content)) for c in s.candidates]
    reasons = ev.admit(cands, msg, [c.topic for c in s.candidates])
    return [c for c, why in zip(s.candidates, reasons, strict=True) if why is not None]


def replay(samples: Sequence[Sample], ev: Evidence) -> dict[str, float]:
    n_kept = found = unneeded = needed_seen = 0
    for s in samples:
        needed_seen += sum(1 for c in s.candidates if c.key in s.needed)
        for c in kept(s, ev):
            n_kept += 1
            if c.key in s.needed:
                found += 1
            else:
                unneeded += 1
    return asdict(ev) | {
        "kept": n_kept,
        "needed_kept_share": round(found / needed_seen, 3) if needed_seen else 1.0,
        "unneeded_share": round(unneeded / n_kept, 3) if n_kept else 0.0,
    }


def replay_locomo(samples: Sequence[Sample], pick: dict) -> dict[str, float]:
    """Evidence recall of the blocks under ``pick`` (profile items stay) against the
    blocks without a gate: what the gate would cost on LoCoMo dev."""
    ev = evidence_of(pick)
    before = after = 0.0
    for s in samples:
        got = {c.key for c in s.candidates} | s.fixed
        keep = {c.key for c in kept(s, ev)} | s.fixed
        before += len(s.needed & got) / len(s.needed)
        after += len(s.needed & keep) / len(s.needed)
    n = max(1, len(samples))
    return {
        "questions": len(samples),
        "block_recall_no_gate": round(before / n, 4),
        "block_recall_pick": round(after / n, 4),
    }


def evidence_of(row: dict) -> Evidence:
    names = ("strong", "weak", "margin", "min_shared", "ignore_time_words", "time_free")
    return Evidence(**{k: row[k] for k in names if k in row})


OFF = {"margin": 2.0, "min_shared": 1, "ignore_time_words": False, "time_free": False}


def levers(cal: Sequence[Sample], held: Sequence[Sample], pick: Evidence) -> dict[str, dict]:
    """Each of the rule's levers on its own: the pick with that one lever off, and the
    old rule (cosine thresholds only) with only that lever on (calibration / held-out)."""
    out: dict[str, dict] = {}
    base = Evidence(pick.strong, pick.weak)
    for name, off in OFF.items():
        without = replace(pick, **{name: off})
        alone = replace(base, **{name: getattr(pick, name)})
        out[name] = {
            "value": getattr(pick, name),
            "pick_without": {
                "calibration": _brief(replay(cal, without)),
                "held_out": _brief(replay(held, without)),
            },
            "thresholds_plus_this": {
                "calibration": _brief(replay(cal, alone)),
                "held_out": _brief(replay(held, alone)),
            },
        }
    out["thresholds_only"] = {
        "calibration": _brief(replay(cal, base)),
        "held_out": _brief(replay(held, base)),
    }
    return out


def _brief(row: dict) -> dict:
    return {k: row[k] for k in ("kept", "needed_kept_share", "unneeded_share")}


def grid() -> list[Evidence]:
    return [
        Evidence(a, b, m, n, t, f)
        for a, b, m, n, t, f in itertools.product(
            STRONG, WEAK, MARGIN, MIN_SHARED, TIME_WORDS, TIME_FREE
        )
        if b <= a
    ]


def calibrate(samples: Sequence[Sample], max_unneeded: float = 0.15) -> dict:
    cal = [s for s in samples if s.half == "calibration"]
    held = [s for s in samples if s.half == "held_out"]
    rows = [replay(cal, ev) for ev in grid()]
    ok = [g for g in rows if g["unneeded_share"] <= max_unneeded] or rows
    best = max(
        ok,
        key=lambda g: (
            g["needed_kept_share"],
            -g["unneeded_share"],
            -g["weak"],
            g["margin"],
            -g["min_shared"],
            -g["strong"],
            g["time_free"],
        ),
    )
    return {
        "pick": best,
        "held_out": replay(held, evidence_of(best)) if held else None,
        "levers": levers(cal, held, evidence_of(best)),
        "grid_size": len(rows),
        "grid_ok": len([g for g in rows if g["unneeded_share"] <= max_unneeded]),
    }
