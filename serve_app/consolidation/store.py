"""SQL of consolidation: load a user's memories with vectors, archive merged or
digested ones (with history), decay unused importance, remember each run.

Each write is one statement with its history rows and the owner-version bump
(caches see the change), like every other memory write; ``conn`` is the caller's
short transaction that holds the run's lease (see :mod:`serve_app.consolidation.lease`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store import history
from serve_app.store.memory_index import using
from serve_app.store.records import Owner, live, unclaimed, valid
from serve_app.store.vectors import as_array, table_name
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_ctes


def _owned(i: str = "") -> str:
    """The owner's active, unexpired memories valid now (``i``: alias prefix): a retired
    memory is history, never merged, reflected on or decayed; nor is a document's chunk
    (knowledge, not a memory)."""
    return (
        f"{i}tenant_id = %(tenant_id)s AND {i}user_id = %(user_id)s AND {i}status = 'active'"
        f" AND {i}type <> 'document_chunk' AND {live(i)} AND {valid(i)}"
    )


_OWNED = _owned()
_OWNED_I = _owned("i.")


class ConsolidationStore:
    def __init__(self, pool: AsyncConnectionPool, model_slug: str) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))

    def _params(self, owner: Owner, **more: Any) -> dict[str, Any]:
        return {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "channel": CHANGES_CHANNEL,
            "actor": "consolidation",
            **more,
        }

    async def load(self, owner: Owner, limit: int) -> list[dict[str, Any]]:
        """The user's active memories (newest first, at most ``limit``) with embeddings."""
        query = sql.SQL(
            "SELECT i.id, i.type, i.content, i.importance, i.confidence, i.tags, i.data,"
            " i.version, i.source, i.created_at, v.embedding FROM memory_items i"
            " JOIN {v} v ON v.item_id = i.id WHERE "
            + _OWNED_I
            + " ORDER BY i.created_at DESC LIMIT %(limit)s"
        ).format(v=self.vectors)
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, self._params(owner, limit=limit))
            rows = await cur.fetchall()
        for r in rows:
            r["embedding"] = as_array(r["embedding"])
        return rows

    async def archive(
        self,
        owner: Owner,
        versions: dict[uuid.UUID, int],
        into: uuid.UUID,
        reason: str,
        conn: AsyncConnection | None = None,
    ) -> int:
        """Archive memories (still at the given versions) absorbed into ``into``; each
        gets a MERGE history event pointing at it. Returns how many changed."""
        query = sql.SQL(
            "WITH src AS (SELECT * FROM unnest(%(ids)s::uuid[], %(versions)s::int[]) AS s(id, v)),"
            " gone AS (UPDATE memory_items i SET status = 'archived', version = i.version + 1,"
            " updated_at = now(), data = i.data || %(mark)s FROM src"
            " WHERE i.id = src.id AND i.version = src.v AND "
            + _OWNED_I
            + " RETURNING i.id, i.user_id, i.owner, i.content), {hist}, {bump}"
            " SELECT (SELECT count(*) FROM gone) AS n, {notified} AS notified"
        ).format(
            hist=history.record_cte(
                "hist",
                sql.SQL(
                    "SELECT id AS memory_id, user_id, 'MERGE'::text AS event,"
                    " content AS old_content, NULL::text AS new_content FROM gone"
                ),
            ),
            bump=bump_ctes(sql.SQL("SELECT owner FROM gone")),
            notified=NOTIFIED,
        )
        params = self._params(
            owner,
            ids=list(versions),
            versions=list(versions.values()),
            mark=Jsonb({reason: str(into)}),
        )
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(query, params)
            return (await cur.fetchone())["n"]

    async def decay(
        self,
        owner: Owner,
        *,
        age_days: float,
        factor: float,
        floor: float,
        limit: int,
        conn: AsyncConnection | None = None,
    ) -> int:
        """Lower the importance of old memories nobody retrieved (never accessed, or not
        for ``age_days``), at most once per ``age_days`` per memory (idempotent)."""
        query = sql.SQL(
            "WITH due AS (SELECT id FROM memory_items WHERE "
            + _OWNED
            + " AND type <> 'insight' AND importance > %(floor)s"
            " AND created_at < now() - %(age)s * interval '1 day'"
            " AND coalesce(last_accessed_at, created_at) < now() - %(age)s * interval '1 day'"
            " AND coalesce((data->>'decayed_at')::timestamptz, '-infinity')"
            " < now() - %(age)s * interval '1 day' LIMIT %(limit)s),"
            " upd AS (UPDATE memory_items i SET importance = greatest(%(floor)s,"
            " i.importance * %(factor)s), version = i.version + 1,"
            " data = i.data || jsonb_build_object('decayed_at', now())"
            " FROM due WHERE i.id = due.id RETURNING i.owner), {bump}"
            " SELECT (SELECT count(*) FROM upd) AS n, {notified} AS notified"
        ).format(bump=bump_ctes(sql.SQL("SELECT owner FROM upd")), notified=NOTIFIED)
        params = self._params(owner, age=age_days, factor=factor, floor=floor, limit=limit)
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(query, params)
            return (await cur.fetchone())["n"]

    async def insight_keys(self, owner: Owner) -> set[str]:
        """Cluster keys of the insights the user already has (an insight is made once)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT data->>'cluster_key' AS k FROM memory_items WHERE tenant_id ="
                " %(tenant_id)s AND user_id = %(user_id)s AND type = 'insight'"
                " AND data ? 'cluster_key'",
                self._params(owner),
            )
            return {r["k"] for r in await cur.fetchall()}

    async def record_run(
        self, owner: Owner, report: dict[str, Any], conn: AsyncConnection | None = None
    ) -> None:
        async with using(self.pool, conn) as conn:
            await conn.execute(
                "INSERT INTO consolidation_state (tenant_id, user_id, last_run_at, last_report)"
                " VALUES (%(tenant_id)s, %(user_id)s, now(), %(report)s)"
                " ON CONFLICT (tenant_id, user_id) DO UPDATE SET last_run_at = now(),"
                " last_report = EXCLUDED.last_report",
                self._params(owner, report=Jsonb(report)),
            )

    async def due_users(self, min_interval_s: float, limit: int) -> Sequence[Owner]:
        """Users with memories changed since their last run (never run: first), oldest run
        first, each at most once per ``min_interval_s``; not those another run holds."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT i.tenant_id, i.user_id FROM memory_items i"
                " LEFT JOIN consolidation_state c USING (tenant_id, user_id)"
                " WHERE i.user_id IS NOT NULL AND i.status = 'active'"
                " AND (c.last_run_at IS NULL OR (i.updated_at > c.last_run_at"
                " AND c.last_run_at < now() - %(gap)s * interval '1 second'))"
                " AND " + unclaimed("c.") + " GROUP BY i.tenant_id, i.user_id, c.last_run_at"
                " ORDER BY c.last_run_at NULLS FIRST LIMIT %(limit)s",
                {"gap": min_interval_s, "limit": limit},
            )
            return [Owner(r["tenant_id"], r["user_id"]) for r in await cur.fetchall()]
