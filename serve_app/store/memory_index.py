"""Lookups over ``memory_items`` for write decisions (extraction's dedup and junk guard).

Only memories valid now count: a retired memory is history, not a duplicate.

Dedup is exact normalised hash, then embedding similarity. Lookups go straight
to PostgreSQL (the source of truth), not a cache: a write decision must see
every memory of the user, including ones written a moment ago.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import Owner, column_list, live, valid
from serve_app.store.vectors import table_name
from serve_app.text import dedupe_hash

_MATCH_COLUMNS = ("id", "content", "importance", "confidence", "tags", "data", "version")


@dataclass(frozen=True)
class Match:
    id: uuid.UUID
    content: str
    similarity: float
    importance: float
    confidence: float
    tags: list[str]
    data: dict[str, Any]
    version: int = 1


class VersionConflict(RuntimeError):
    """The memory changed since the caller read it (its row version moved on)."""

    def __init__(self, current: int | None) -> None:
        super().__init__(f"memory was modified (current version {current})")
        self.current = current


@asynccontextmanager
async def using(
    pool: AsyncConnectionPool, conn: AsyncConnection | None
) -> AsyncIterator[AsyncConnection]:
    """``conn`` when the caller holds one (its transaction and locks), else a pooled one."""
    if conn is not None:
        yield conn
        return
    async with pool.connection() as pooled:
        yield pooled


# Owner's rows first (MATERIALIZED: the planner may not fold the filter into a global
# HNSW scan), exact distances over them, then the top k.
NEAREST_SQL = (
    "WITH mine AS MATERIALIZED (SELECT {cols}, v.embedding <=> %(vec)s AS distance"
    " FROM memory_items i JOIN {v} v ON v.item_id = i.id"
    " WHERE i.tenant_id = %(tenant_id)s AND i.user_id = %(user_id)s"
    " AND i.status = 'active' AND i.type <> 'document_chunk' AND "
    + live("i.")
    + " AND "
    + valid("i.")
    + "{tf})"
    " SELECT *, 1 - distance AS similarity FROM mine ORDER BY distance LIMIT %(k)s"
)

# The same owner's rows once, then each query vector's best match over them: the
# similarity ``nearest(..., 1)`` gives, for many vectors in one round trip.
BEST_SQL = (
    "WITH mine AS MATERIALIZED (SELECT v.embedding"
    " FROM memory_items i JOIN {v} v ON v.item_id = i.id"
    " WHERE i.tenant_id = %(tenant_id)s AND i.user_id = %(user_id)s"
    " AND i.status = 'active' AND i.type <> 'document_chunk' AND "
    + live("i.")
    + " AND "
    + valid("i.")
    + ")"
    " SELECT q.ord, 1 - (SELECT min(m.embedding <=> q.vec) FROM mine m) AS similarity"
    " FROM unnest(%(vecs)s::vector[]) WITH ORDINALITY AS q(vec, ord) ORDER BY q.ord"
)


class MemoryIndex:
    """Read-only lookups over one user's memories for dedup and the junk guard (a
    user's document chunks are knowledge, never a duplicate to merge into)."""

    def __init__(self, pool: AsyncConnectionPool, model_slug: str) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))

    async def by_hash(
        self, owner: Owner, content: str, conn: AsyncConnection | None = None
    ) -> uuid.UUID | None:
        """An active memory with this normalised text, now or before a merge (``aliases``)."""
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(
                "SELECT id FROM memory_items WHERE tenant_id = %(tenant_id)s"
                " AND user_id = %(user_id)s"
                " AND (dedupe_hash = %(hash)s OR data->'aliases' ? %(hash)s)"
                " AND status = 'active' AND type <> 'document_chunk' AND "
                + live()
                + " AND "
                + valid()
                + " LIMIT 1",
                {
                    "tenant_id": owner.tenant_id,
                    "user_id": owner.user_id,
                    "hash": dedupe_hash(content),
                },
            )
            row = await cur.fetchone()
        return row["id"] if row else None

    async def nearest(
        self,
        owner: Owner,
        vector: np.ndarray,
        k: int = 1,
        types: tuple[str, ...] = (),
        conn: AsyncConnection | None = None,
    ) -> list[Match]:
        """The user's ``k`` most similar active memories (cosine): an exact scan of the
        owner's own rows.

        The owner's rows are materialised first (owner index, then vector lookups by
        primary key) and only then ordered by distance: ordering the whole vector table
        through the global HNSW index and filtering afterwards would keep only the
        global top candidates, so dedup would miss the user's duplicates on a big table
        (``loadtests/bench_dedup_plan.py`` checks the plan on 1M rows).
        """
        query = sql.SQL(NEAREST_SQL).format(
            cols=column_list(_MATCH_COLUMNS, "i"),
            v=self.vectors,
            tf=sql.SQL(" AND i.type = ANY(%(types)s)") if types else sql.SQL(""),
        )
        params = {
            "vec": np.asarray(vector, dtype=np.float32),
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "types": list(types),
            "k": k,
        }
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(query, params)
            rows = await cur.fetchall()
        return [
            Match(
                r["id"],
                r["content"],
                float(r["similarity"]),
                r["importance"],
                r["confidence"],
                list(r["tags"]),
                dict(r["data"] or {}),
                r["version"],
            )
            for r in rows
        ]

    async def best_similarities(
        self, owner: Owner, vectors: Sequence[np.ndarray]
    ) -> list[float | None]:
        """Per vector, the similarity of the user's closest active memory (None: the user
        has none), as ``nearest(owner, vector, 1)`` gives it, in one statement."""
        if not len(vectors):
            return []
        params = {
            "vecs": [np.asarray(v, dtype=np.float32) for v in vectors],
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql.SQL(BEST_SQL).format(v=self.vectors), params)
            rows = await cur.fetchall()
        return [None if r["similarity"] is None else float(r["similarity"]) for r in rows]

    async def recent_contents(self, owner: Owner, limit: int = 200) -> list[str]:
        """Recent/important memory texts of the user (containment check of the junk guard)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT content FROM memory_items WHERE tenant_id = %(tenant_id)s"
                " AND user_id = %(user_id)s AND status = 'active' AND source <> 'turn'"
                " AND type <> 'document_chunk'"
                " AND "
                + live()
                + " AND "
                + valid()
                + " ORDER BY importance DESC, updated_at DESC LIMIT %(limit)s",
                {"tenant_id": owner.tenant_id, "user_id": owner.user_id, "limit": limit},
            )
            return [r["content"] for r in await cur.fetchall()]
