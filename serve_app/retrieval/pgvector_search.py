"""Dense search answered by pgvector's HNSW index (iterative scans keep filtered queries full)."""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.retrieval.query import SearchQuery, item_filters
from serve_app.store.records import MEMORY_COLUMNS
from serve_app.store.vectors import table_name

_ITEM_COLS = sql.SQL(", ").join(
    sql.SQL("i.{}").format(sql.Identifier(c.strip())) for c in MEMORY_COLUMNS.split(",")
)


class PgVectorSearch:
    def __init__(self, pool: AsyncConnectionPool, model_slug: str, ef_search: int) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))
        self.ef_search = ef_search

    async def dense(self, q: SearchQuery, vector: np.ndarray, limit: int) -> list[dict[str, Any]]:
        where, params = item_filters(q)
        vec = np.asarray(vector, dtype=np.float32)
        query = sql.SQL(
            "SELECT {cols}, 1 - (v.embedding <=> %s) AS similarity"
            " FROM {v} v JOIN memory_items i ON i.id = v.item_id"
            " WHERE v.tenant_id = %s AND v.owner = %s AND {w}"
            " ORDER BY v.embedding <=> %s LIMIT %s"
        ).format(cols=_ITEM_COLS, v=self.vectors, w=where)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                sql.SQL("SET LOCAL hnsw.ef_search = {}").format(
                    sql.Literal(max(self.ef_search, limit))
                )
            )
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cur = await conn.execute(query, (vec, q.tenant_id, q.user_id, *params, vec, limit))
            return await cur.fetchall()
