"""The retriever's logic without Ray: candidate generation, then ranking.

``deployments/retriever.py`` wraps this class; unit tests use it directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.ranking import RankWeights, rank
from serve_app.retrieval.pgvector_search import PgVectorSearch
from serve_app.retrieval.query import SearchQuery
from serve_app.settings import Settings


class Retriever:
    def __init__(self, pool: AsyncConnectionPool, model_slug: str, settings: Settings) -> None:
        self.pg = PgVectorSearch(pool, model_slug, settings.hnsw_ef_search)
        self.weights = RankWeights.from_settings(settings)

    def candidate_count(self, q: SearchQuery) -> int:
        return max(q.top_k * 3, 20)

    async def search(self, q: SearchQuery, vector: np.ndarray) -> list[dict[str, Any]]:
        candidates = await self.pg.dense(q, vector, self.candidate_count(q))
        return rank(candidates, self.weights, top_k=q.top_k, threshold=q.threshold)
