"""Lookups over ``memory_items`` for write decisions (extraction's dedup and junk guard).

Dedup is exact normalised hash, then embedding similarity. Lookups go straight
to PostgreSQL (the source of truth), not a cache: a write decision must see
every memory of the user, including ones written a moment ago.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import Owner, column_list
from serve_app.store.vectors import table_name
from serve_app.text import dedupe_hash

_MATCH_COLUMNS = ("id", "content", "importance", "confidence", "tags", "data")


@dataclass(frozen=True)
class Match:
    id: uuid.UUID
    content: str
    similarity: float
    importance: float
    confidence: float
    tags: list[str]
    data: dict[str, Any]


class MemoryIndex:
    """Read-only lookups over one user's memories for dedup and the junk guard."""

    def __init__(self, pool: AsyncConnectionPool, model_slug: str) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))

    async def by_hash(self, owner: Owner, content: str) -> uuid.UUID | None:
        """An active memory with this normalised text, now or before a merge (``aliases``)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM memory_items WHERE tenant_id = %(tenant_id)s"
                " AND user_id = %(user_id)s"
                " AND (dedupe_hash = %(hash)s OR data->'aliases' ? %(hash)s)"
                " AND status = 'active' LIMIT 1",
                {
                    "tenant_id": owner.tenant_id,
                    "user_id": owner.user_id,
                    "hash": dedupe_hash(content),
                },
            )
            row = await cur.fetchone()
        return row["id"] if row else None

    async def nearest(
        self, owner: Owner, vector: np.ndarray, k: int = 1, types: tuple[str, ...] = ()
    ) -> list[Match]:
        """The user's ``k`` most similar active memories (cosine), exact scan over the user."""
        type_filter = sql.SQL(" AND i.type = ANY(%(types)s)") if types else sql.SQL("")
        query = sql.SQL(
            "SELECT {cols}, 1 - (v.embedding <=> %(vec)s) AS similarity"
            " FROM memory_items i JOIN {v} v ON v.item_id = i.id"
            " WHERE i.tenant_id = %(tenant_id)s AND i.user_id = %(user_id)s"
            " AND i.status = 'active'{tf} ORDER BY v.embedding <=> %(vec)s LIMIT %(k)s"
        ).format(cols=column_list(_MATCH_COLUMNS, "i"), v=self.vectors, tf=type_filter)
        params = {
            "vec": np.asarray(vector, dtype=np.float32),
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "types": list(types),
            "k": k,
        }
        async with self.pool.connection() as conn:
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
            )
            for r in rows
        ]

    async def recent_contents(self, owner: Owner, limit: int = 200) -> list[str]:
        """Recent/important memory texts of the user (containment check of the junk guard)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT content FROM memory_items WHERE tenant_id = %(tenant_id)s"
                " AND user_id = %(user_id)s AND status = 'active' AND source <> 'turn'"
                " ORDER BY importance DESC, updated_at DESC LIMIT %(limit)s",
                {"tenant_id": owner.tenant_id, "user_id": owner.user_id, "limit": limit},
            )
            return [r["content"] for r in await cur.fetchall()]
