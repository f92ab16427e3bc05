"""Reciprocal rank fusion of ranked candidate lists (dense, lexical)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def rrf(
    lists: Sequence[Sequence[Hashable]], weights: Sequence[float], k: int
) -> dict[Hashable, float]:
    """id -> fused score in 0..1: sum of w / (k + rank) over the lists, over its maximum.

    The maximum (every list ranks the id first) is sum(w) / (k + 1) over the lists
    that returned anything, so an item ranked first everywhere scores exactly 1.
    """
    fused: dict[Hashable, float] = {}
    total = 0.0
    for ids, w in zip(lists, weights, strict=True):
        if not ids or w <= 0:
            continue
        total += w / (k + 1)
        for rank, item in enumerate(ids, start=1):
            fused[item] = fused.get(item, 0.0) + w / (k + rank)
    return {i: s / total for i, s in fused.items()} if total else {}
