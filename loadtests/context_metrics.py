"""Scoring for loadtests/bench_context.py: what a context block (or a search) carried,
against what the message needed (issue 29).

- needed recall: the share of the needed memories/facts that are in the block (micro);
- unneeded share (profile material excluded): of the block's items that are not
  profile material by their *label* (instruction, constraint, identity), the share not
  needed; the same exclusion for every variant, so a block without a profile section
  is measured the same way;
- retrieved-section share: of the items outside the block's profile section, the
  share not needed (what the evidence gate is for);
- profile tokens and total tokens per block.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadtests.stats import percentile

PROFILE_CLASSES = ("instruction", "constraint", "identity")


@dataclass
class Labels:
    """One user's items: id -> key, and the keys that are profile material."""

    key_of: dict[str, str] = field(default_factory=dict)
    profile_keys: set[str] = field(default_factory=set)

    def key(self, item_id: object) -> str | None:
        return self.key_of.get(str(item_id))


@dataclass
class Outcome:
    """One message's block (or search) as keys, with its sections and cost."""

    needed: frozenset[str]
    got: frozenset[str]  # every item of the block
    outside_profile: frozenset[str]  # items outside the block's profile section
    tokens: int = 0
    profile_tokens: int = 0
    latency_ms: float = 0.0


def outcome(
    labels: Labels,
    needed: Iterable[str],
    profile_ids: Iterable[object],
    other_ids: Iterable[object],
    helpful: Iterable[str] = (),
    **cost: float,
) -> Outcome:
    """``helpful``: keys that may go in or stay out (neither right nor wrong): left out
    of the block's items, so they count neither as found nor as unneeded."""
    skip = set(helpful) - set(needed)
    prof = {k for k in map(labels.key, profile_ids) if k} - skip
    other = {k for k in map(labels.key, other_ids) if k} - prof - skip
    return Outcome(frozenset(needed), frozenset(prof | other), frozenset(other), **cost)  # type: ignore[arg-type]


def summarise(outs: Sequence[Outcome], labels_profile: set[str]) -> dict[str, float]:
    """Micro-averaged figures over ``outs``; ``labels_profile``: keys (user-qualified)
    that are profile material by label."""
    need = sum(len(o.needed) for o in outs)
    found = sum(len(o.needed & o.got) for o in outs)
    non_profile = [k for o in outs for k in o.got if k not in labels_profile]
    non_profile_unneeded = sum(
        1 for o in outs for k in o.got if k not in labels_profile and k not in o.needed
    )
    section = sum(len(o.outside_profile) for o in outs)
    section_unneeded = sum(len(o.outside_profile - o.needed) for o in outs)
    small = [o for o in outs if not o.needed]
    lat = [o.latency_ms for o in outs]
    return {
        "messages": len(outs),
        "needed_recall": round(found / need, 3) if need else 1.0,
        "unneeded_share": round(non_profile_unneeded / len(non_profile), 3) if non_profile else 0.0,
        "retrieved_unneeded_share": round(section_unneeded / section, 3) if section else 0.0,
        "small_talk_items": round(statistics.fmean([len(o.outside_profile) for o in small]), 2)
        if small
        else 0.0,
        "profile_tokens_mean": round(statistics.fmean([o.profile_tokens for o in outs]), 1)
        if outs
        else 0.0,
        "tokens_mean": round(statistics.fmean([o.tokens for o in outs]), 1) if outs else 0.0,
        "p50_ms": round(percentile(lat, 50), 2),
        "p95_ms": round(percentile(lat, 95), 2),
    }


def classifier_scores(predicted: dict[str, str | None], truth: dict[str, str | None]) -> dict:
    """Precision/recall of "is profile material" and accuracy of the class where both agree
    it is (keys: the memories written; values: class or None)."""
    pred = {k for k, c in predicted.items() if c}
    gold = {k for k, c in truth.items() if c}
    both = pred & gold
    same = sum(1 for k in both if predicted[k] == truth[k])
    return {
        "labelled": len(truth),
        "predicted_profile": len(pred),
        "precision": round(len(both) / len(pred), 3) if pred else 1.0,
        "recall": round(len(both) / len(gold), 3) if gold else 1.0,
        "class_accuracy": round(same / len(both), 3) if both else 1.0,
        "false_positives": sorted(pred - gold)[:12],
        "misses": sorted(gold - pred)[:12],
    }
