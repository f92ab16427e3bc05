"""Reads across one tenant's owners: who owns a memory id, which entities exist, a user's
whole history, a numbered page of a list with its count.

The mem0 compatibility routes need them because the mem0 client names no user on by-id
calls (a service key then finds the owner within its tenant, never beyond it), and the
export streams a user's history in one pass instead of one query per memory.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.history import HISTORY_COLUMNS
from serve_app.store.records import MEMORY_COLUMNS, Owner, column_list, live, valid

_LIVE = live()
_MAX_OFFSET = 2**62
# The page plus one row (is there more?); the list is counted only when the page does
# not end it. A page past the end still gives one row (NULL columns) with the count.
_PAGE_SQL = (
    "WITH page AS MATERIALIZED (SELECT {cols} FROM memory_items WHERE {w}"
    " ORDER BY created_at DESC, id DESC OFFSET %(offset)s LIMIT %(fetch)s),"
    " got AS (SELECT count(*) AS n FROM page)"
    " SELECT CASE WHEN got.n > %(limit)s OR (got.n = 0 AND %(offset)s > 0)"
    " THEN (SELECT count(*) FROM memory_items WHERE {w}) END AS total, page.*"
    " FROM got LEFT JOIN page ON true ORDER BY page.created_at DESC, page.id DESC"
)
ENTITY_COLUMNS = {"user": "user_id", "agent": "agent_id", "run": "session_id"}


class MemoryDirectory:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def owners(self, tenant_id: str, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str | None]:
        """id -> user_id (None: a shared memory) of the live memories among ``ids``."""
        if not ids:
            return {}
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, user_id FROM memory_items"
                " WHERE tenant_id = %(tenant_id)s AND id = ANY(%(ids)s) AND " + _LIVE,
                {"tenant_id": tenant_id, "ids": list(ids)},
            )
            return {r["id"]: r["user_id"] for r in await cur.fetchall()}

    async def page(
        self,
        owner: Owner,
        *,
        offset: int,
        limit: int,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """The owner's live memories valid now (None: the tenant's shared ones), newest
        first, from ``offset``, and how many the whole list holds: one statement.

        A page that ends the list gives the count (offset + its rows); only a page with
        more after it, or one past the end, counts the list (mem0's numbered pages).
        """
        where = [
            sql.SQL("tenant_id = %(tenant_id)s"),
            sql.SQL(_LIVE),
            sql.SQL(valid()),
            sql.SQL("user_id IS NULL" if owner.user_id is None else "user_id = %(user_id)s"),
            sql.SQL("type <> 'document_chunk'"),  # knowledge, listed with its document
        ]
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "offset": min(offset, _MAX_OFFSET),  # beyond any list: a page past the end
            "limit": limit,
            "fetch": limit + 1,
        }
        for column, value in (("agent_id", agent_id), ("session_id", session_id)):
            if value is not None:
                where.append(
                    sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
                )
                params[column] = value
        query = sql.SQL(_PAGE_SQL).format(
            cols=column_list(MEMORY_COLUMNS), w=sql.SQL(" AND ").join(where)
        )
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            got = await cur.fetchall()
        rows = [{c: r[c] for c in MEMORY_COLUMNS} for r in got if r["id"] is not None]
        total = got[0]["total"]  # None: this page ends the list (at most ``limit`` rows)
        return rows[:limit], (offset + len(rows)) if total is None else total

    async def entities(
        self, tenant_id: str, user_id: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """Users, agents and runs (sessions) that have live memories, at most ``limit`` of
        each kind (first by name), each row with ``kind_total``: how many of its kind there
        are; ``user_id`` narrows to one user's (a user key sees only its own)."""
        parts = []
        for kind, column in ENTITY_COLUMNS.items():
            parts.append(
                sql.SQL(
                    "(SELECT {kind} AS type, {col} AS name, count(*) AS total_memories,"
                    " min(created_at) AS created_at, max(updated_at) AS updated_at,"
                    " count(*) OVER () AS kind_total"
                    " FROM memory_items WHERE tenant_id = %(tenant_id)s AND {col} IS NOT NULL"
                    " AND {mine} AND " + _LIVE + " GROUP BY {col} ORDER BY {col}"
                    " LIMIT %(limit)s)"
                ).format(
                    kind=sql.Literal(kind),
                    col=sql.Identifier(column),
                    mine=sql.SQL("true" if user_id is None else "user_id = %(user_id)s"),
                )
            )
        query = sql.SQL(" UNION ALL ").join(parts) + sql.SQL(" ORDER BY type DESC, name")
        params = {"tenant_id": tenant_id, "user_id": user_id, "limit": limit}
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def users_with(self, tenant_id: str, kind: str, name: str) -> list[str]:
        """The users of the tenant with live memories of agent/run ``name``."""
        query = sql.SQL(
            "SELECT DISTINCT user_id FROM memory_items WHERE tenant_id = %(tenant_id)s"
            " AND {col} = %(name)s AND user_id IS NOT NULL AND " + _LIVE + " ORDER BY user_id"
        ).format(col=sql.Identifier(ENTITY_COLUMNS[kind]))
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {"tenant_id": tenant_id, "name": name})
            return [r["user_id"] for r in await cur.fetchall()]

    async def history(self, owner: Owner, *, page: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """Every history event of the user's memories, oldest first, in pages of ``page``."""
        after = 0
        query = sql.SQL(
            "SELECT {cols} FROM memory_history WHERE tenant_id = %(tenant_id)s"
            " AND user_id = %(user_id)s AND id > %(after)s ORDER BY id LIMIT %(page)s"
        ).format(cols=column_list(HISTORY_COLUMNS))
        while True:
            async with self.pool.connection() as conn:
                cur = await conn.execute(
                    query,
                    {
                        "tenant_id": owner.tenant_id,
                        "user_id": owner.user_id,
                        "after": after,
                        "page": page,
                    },
                )
                rows = await cur.fetchall()
            for row in rows:
                yield row
            if len(rows) < page:
                return
            after = rows[-1]["id"]
