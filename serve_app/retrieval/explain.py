"""Why a memory ranked where it did: a search's score split into its signals (``explain``).

Built only when a search asks (``SearchQuery.explain``); otherwise the retriever never
calls anything here, so an ordinary search pays nothing. The parts, per result:

- ``similarity``: cosine between the query and the memory (-1..1);
- ``lexical``: the keyword match's share of the fused relevance (z-scored BM25 x
  (1 - alpha) on cached owners, its reciprocal-rank share when fused by RRF);
- ``entity``, ``time``: the direct bonuses for named entities and the time asked about;
- ``neighbour``, ``expansion``: bonuses lent by the memory's neighbours in creation
  order and by the best hits' rare entities or session (multi-hop expansion);
- ``relevance``: the fused relevance the ranking used (0..1);
- ``importance``, ``recency``: their weighted terms of the final score;
- ``final``: the score the results are ordered by
  (w_similarity x relevance + importance + recency).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from serve_app.ranking import recency
from serve_app.retrieval.signals import Segment, direct_scores
from serve_app.retrieval.temporal import TimeIntent
from serve_app.settings import RankSettings

Parts = dict[Hashable, dict[str, float]]
FUSED = ("lexical", "entity", "time", "neighbour", "expansion")


def time_part(
    segments: Sequence[Segment], intent: TimeIntent, weight: float, period_weight: float = 0.0
) -> np.ndarray:
    """The time bonus alone of every fused position (``direct_scores`` adds entities too)."""
    if not segments:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(
        [direct_scores(seg, intent, 0.0, weight, period_weight) for seg in segments]
    )


def zscore_parts(ids: Sequence[Hashable], top: np.ndarray, **arrays: np.ndarray) -> Parts:
    """id -> the named per-position arrays' values, for the candidate positions ``top``."""
    return {ids[int(i)]: {k: float(v[int(i)]) for k, v in arrays.items()} for i in top}


def rrf_parts(
    dense_ids: Sequence[Hashable],
    lex_ids: Sequence[Hashable],
    w_lexical: float,
    w_dense: float,
    k: int,
) -> Parts:
    """id -> the lexical list's share of its RRF score (same scale as ``fusion.rrf``)."""
    total = sum(w / (k + 1) for ids, w in ((dense_ids, w_dense), (lex_ids, w_lexical)) if ids)
    if not total or w_lexical <= 0:
        return {}
    return {i: {"lexical": w_lexical / (k + rank) / total} for rank, i in enumerate(lex_ids, 1)}


def attach(
    ranked: list[dict[str, Any]], parts: Parts, w: RankSettings, now: datetime | None = None
) -> None:
    """Put the breakdown on each ranked row (``explain``); rows still carry ``relevance``."""
    now = now or datetime.now(UTC)
    for row in ranked:
        got = parts.get(row["id"], {})
        when = row["updated_at"]
        if w.recency_from == "accessed" and row.get("last_accessed_at") is not None:
            when = max(when, row["last_accessed_at"])
        relevance = row.get("relevance", row.get("similarity")) or 0.0
        row["explain"] = {
            "similarity": row.get("similarity"),
            **{name: got.get(name, 0.0) for name in FUSED},
            "relevance": float(relevance),
            "importance": w.w_importance * float(row["importance"]),
            "recency": w.w_recency * recency(when, now, w.recency_half_life_days),
            "final": float(row["score"]),
        }
