"""Final ordering of retrieved memories: relevance, importance and recency.

score = w_sim * relevance + w_imp * importance + w_rec * 0.5 ** (age_days / half_life)

``relevance`` is what the search mode measures: in dense mode the cosine
similarity itself; in hybrid and lexical mode the reciprocal-rank-fusion score
normalised to 0..1 (1 = ranked first by every retriever used, see
``serve_app.retrieval.fusion``). A candidate without ``relevance`` uses its similarity.

The threshold of a search is always applied to ``similarity``: the cosine between
the query embedding and the memory's embedding (-1..1), in every mode. Lexical-only
hits (found by full-text search, not by the dense index) carry their real cosine
too (the retriever computes it from their stored vectors), so a threshold drops a
keyword match whose meaning is far from the query exactly as it drops a dense hit.
``score`` only orders results; ``similarity`` is kept in results for callers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from serve_app.settings import RankSettings


def recency(updated_at: datetime, now: datetime, half_life_days: float) -> float:
    age_days = max((now - updated_at).total_seconds(), 0.0) / 86400.0
    return 0.5 ** (age_days / half_life_days) if half_life_days > 0 else 1.0


def score(
    similarity: float, importance: float, updated_at: datetime, w: RankSettings, now: datetime
) -> float:
    return (
        w.w_similarity * similarity
        + w.w_importance * importance
        + w.w_recency * recency(updated_at, now, w.recency_half_life_days)
    )


def rank(
    candidates: list[dict],
    w: RankSettings,
    *,
    top_k: int,
    threshold: float | None,
    now: datetime | None = None,
) -> list[dict]:
    """Drop candidates under the similarity threshold, score the rest, keep the best top_k."""
    now = now or datetime.now(UTC)
    kept = []
    for c in candidates:
        sim = c.get("similarity")
        if threshold is not None and (sim is None or sim < threshold):
            continue
        rel = c.get("relevance", sim)
        when = c["updated_at"]
        if w.recency_from == "accessed" and c.get("last_accessed_at") is not None:
            when = max(when, c["last_accessed_at"])
        c["score"] = score(rel or 0.0, c["importance"], when, w, now)
        kept.append(c)
    kept.sort(key=lambda c: (-c["score"], str(c["id"])))
    return kept[:top_k]


def cap_per_group(
    ranked: list[dict], groups: list[object | None], cap: int, top_k: int
) -> list[dict]:
    """The first ``top_k`` of ``ranked`` with at most ``cap`` per group before the rest.

    Multi-hop answers sit in several sessions; without a cap one session's many
    near-duplicates fill the list. Memories past their group's cap are not dropped,
    only moved after the others (in their order), so the list still fills ``top_k``.
    A None group is never capped.
    """
    if cap <= 0:
        return ranked[:top_k]
    taken: dict[object, int] = {}
    head, tail = [], []
    for c, g in zip(ranked, groups, strict=True):
        if g is not None and taken.get(g, 0) >= cap:
            tail.append(c)
            continue
        if g is not None:
            taken[g] = taken.get(g, 0) + 1
        head.append(c)
        if len(head) == top_k:
            break
    return (head + tail)[:top_k]


def logistic(weights: Sequence[float], x: Sequence[float]) -> float:
    """The logistic of ``weights`` (one per feature, then the bias) over ``x``: the learned
    rules' probability (the evidence gate's admission, the profile's membership)."""
    z = weights[-1] + sum(w * v for w, v in zip(weights[:-1], x, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))  # no overflow
