"""Reads of ``memory_items``: one memory, a page of them, its history, counts.

Every statement carries ``tenant_id`` and the owner, so a memory of another user or
tenant is indistinguishable from a missing one. Writes are not here: the writer
(:class:`serve_app.store.guarded.GuardedWriter`) owns them, with the statements of
:mod:`serve_app.store.memory_writes`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store import history
from serve_app.store.cursor import InvalidCursor, decode_cursor, encode_cursor
from serve_app.store.memory_index import VersionConflict
from serve_app.store.records import (
    MEMORY_COLUMNS,
    Owner,
    column_list,
    live,
    valid,
)
from serve_app.store.versions import CHANGES_CHANNEL

__all__ = ["CHANGES_CHANNEL", "InvalidCursor", "MemoryStore", "VersionConflict"]

# A row that has not expired; and one memory by id, if it is the owner's and live.
_LIVE = live()
_OWNED_LIVE_ID = (
    "id = %(id)s AND tenant_id = %(tenant_id)s"
    " AND user_id IS NOT DISTINCT FROM %(user_id)s AND " + _LIVE
)


class MemoryStore:
    """Reads of the owner's memories (no vectors: search reads those)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ---------- reads ----------

    async def get(self, owner: Owner, item_id: uuid.UUID) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT {cols} FROM memory_items WHERE " + _OWNED_LIVE_ID).format(
                    cols=column_list(MEMORY_COLUMNS)
                ),
                {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id},
            )
            return await cur.fetchone()

    async def list(
        self,
        owner: Owner,
        *,
        limit: int,
        cursor: str | None = None,
        type: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        status: str | None = None,
        as_of: datetime | None = None,
        include_invalidated: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, keyset-paginated on (created_at, id); expired items are hidden,
        and so are retired ones unless ``include_invalidated``; ``as_of``: those valid then."""
        where = [
            sql.SQL("tenant_id = %(tenant_id)s"),
            sql.SQL(_LIVE),
            sql.SQL(valid(at="%(as_of)s") if as_of else "TRUE" if include_invalidated else valid()),
            # None: the tenant's shared memories (two forms: IS NOT DISTINCT FROM is unindexable)
            sql.SQL("user_id IS NULL" if owner.user_id is None else "user_id = %(user_id)s"),
        ]
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "limit": limit + 1,
            "as_of": as_of,
        }
        if type is None:  # a document's chunks are knowledge, listed with their document
            where.append(sql.SQL("type <> 'document_chunk'"))
        filters = {"type": type, "agent_id": agent_id, "session_id": session_id, "status": status}
        for column, value in filters.items():
            if value is not None:
                where.append(
                    sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
                )
                params[column] = value
        if cursor is not None:
            params["after_created"], params["after_id"] = decode_cursor(cursor)
            where.append(sql.SQL("(created_at, id) < (%(after_created)s, %(after_id)s)"))
        query = sql.SQL(
            "SELECT {cols} FROM memory_items WHERE {w}"
            " ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
        ).format(cols=column_list(MEMORY_COLUMNS), w=sql.SQL(" AND ").join(where))
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            rows = await cur.fetchall()
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"])
        return rows, next_cursor

    async def history(
        self, owner: Owner, item_id: uuid.UUID, limit: int
    ) -> list[dict[str, Any]] | None:
        """The memory's newest ``limit`` events, oldest first; None when the memory is not
        the owner's."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM memory_items WHERE " + _OWNED_LIVE_ID,
                {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id},
            )
            if await cur.fetchone() is None:
                return None
            return await history.events(conn, owner.tenant_id, item_id, limit)

    async def count(self, tenant_id: str | None = None) -> int:
        """Row count (tests and metrics)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM memory_items"
                " WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s",
                {"tenant_id": tenant_id},
            )
            return (await cur.fetchone())["n"]
