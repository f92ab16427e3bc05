"""``documents`` and ``document_versions`` (migration 0023), and the chunk rows they own.

A document's chunks are ``memory_items`` of type ``document_chunk`` written through the
:class:`GuardedWriter` (quotas, erasure guard, validation, history), so search, re-embed,
forget and export see them like any memory. This module holds the document's head and
version rows and the statements that find or remove its chunks; a re-post runs
:meth:`DocumentStore.lock`, :meth:`remove_chunks`, the writer's add and
:meth:`save_head` in one transaction of the caller's (serve_app/services/documents.py).

Every statement carries ``tenant_id``: another tenant's document is a missing one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store import events
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.memory_writes import delete_statement
from serve_app.store.records import column_list
from serve_app.store.versions import CHANGES_CHANNEL

__all__ = ["CHUNK_TYPE", "DOCUMENT_COLUMNS", "DocumentStore"]

CHUNK_TYPE = "document_chunk"
CHUNK_SOURCE = "document"

DOCUMENT_COLUMNS: tuple[str, ...] = (
    "document_id",
    "owner",
    "scope",
    "agent_id",
    "user_id",
    "title",
    "source_url",
    "content_type",
    "metadata",
    "tags",
    "version",
    "content_sha256",
    "chars",
    "chunk_count",
    "created_at",
    "updated_at",
)
_HEAD_INPUT = DOCUMENT_COLUMNS[:10] + ("content_sha256", "chars", "chunk_count")

_CHUNKS_OF = sql.SQL(
    "tenant_id = %(tenant_id)s AND type = 'document_chunk'"
    " AND data->>'document_id' = %(document_id)s"
)


class DocumentStore:
    """Heads, versions and chunk lookups of a tenant's documents."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ---------- the re-post transaction (the caller's connection) ----------

    async def lock(
        self, conn: AsyncConnection, tenant_id: str, document_id: str
    ) -> dict[str, Any] | None:
        """Serialise posts and deletes of one document (transaction lock); its head or None."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%(t)s || chr(31) || %(d)s, 33))",
            {"t": tenant_id, "d": document_id},
        )
        return await self.head(tenant_id, document_id, conn=conn)

    async def remove_chunks(
        self, conn: AsyncConnection, tenant_id: str, document_id: str, actor: str | None
    ) -> int:
        """Delete the document's chunks (all of its versions) in ``conn``'s transaction."""
        cur = await conn.execute(
            delete_statement(_CHUNKS_OF),
            {
                "tenant_id": tenant_id,
                "document_id": document_id,
                "actor": actor,
                "channel": CHANGES_CHANNEL,
            },
        )
        return int((await cur.fetchone())["deleted"])

    async def save_head(
        self, conn: AsyncConnection, tenant_id: str, head: dict[str, Any], actor: str | None
    ) -> dict[str, Any]:
        """Insert or replace the head (version + 1), stamp the replaced version, record the
        new one; returns the head as stored."""
        params = {c: head.get(c) for c in _HEAD_INPUT}
        params.update(tenant_id=tenant_id, actor=actor, metadata=Jsonb(head.get("metadata") or {}))
        params["tags"] = list(head.get("tags") or [])
        cols = column_list(_HEAD_INPUT)
        values = sql.SQL(", ").join(sql.Placeholder(c) for c in _HEAD_INPUT)
        updates = sql.SQL(", ").join(
            sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c))
            for c in _HEAD_INPUT
            if c != "document_id"
        )
        query = sql.SQL(
            "INSERT INTO documents (tenant_id, {cols}) VALUES (%(tenant_id)s, {values})"
            " ON CONFLICT (tenant_id, document_id) DO UPDATE SET {updates},"
            " version = documents.version + 1, updated_at = now()"
            " RETURNING {returning}"
        ).format(cols=cols, values=values, updates=updates, returning=column_list(DOCUMENT_COLUMNS))
        row = await (await conn.execute(query, params)).fetchone()
        await conn.execute(
            "UPDATE document_versions SET replaced_at = now() WHERE tenant_id = %(t)s"
            " AND document_id = %(d)s AND replaced_at IS NULL",
            {"t": tenant_id, "d": row["document_id"]},
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO document_versions (tenant_id, {cols}, version, actor)"
                " VALUES (%(tenant_id)s, {values}, %(version)s, %(actor)s)"
            ).format(cols=cols, values=values),
            {**params, "version": row["version"]},
        )
        return row

    # ---------- reads ----------

    async def head(
        self, tenant_id: str, document_id: str, *, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        query = sql.SQL(
            "SELECT {} FROM documents WHERE tenant_id = %(t)s AND document_id = %(d)s"
        ).format(column_list(DOCUMENT_COLUMNS))
        params = {"t": tenant_id, "d": document_id}
        if conn is not None:
            return await (await conn.execute(query, params)).fetchone()
        async with self.pool.connection() as c:
            return await (await c.execute(query, params)).fetchone()

    async def list(
        self,
        tenant_id: str,
        owners: Sequence[str] | None,
        *,
        scope: str | None = None,
        tag: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """Documents of ``owners`` (None: every owner of the tenant), newest first,
        keyset-paged by (updated_at, document_id) after ``after``."""
        where = [sql.SQL("tenant_id = %(t)s")]
        params: dict[str, Any] = {"t": tenant_id, "limit": limit}
        if owners is not None:
            where.append(sql.SQL("owner = ANY(%(owners)s)"))
            params["owners"] = list(owners)
        if scope is not None:
            where.append(sql.SQL("scope = %(scope)s"))
            params["scope"] = scope
        if tag is not None:
            where.append(sql.SQL("tags @> ARRAY[%(tag)s]::text[]"))
            params["tag"] = tag
        if after is not None:
            where.append(sql.SQL("(updated_at, document_id) < (%(at)s::timestamptz, %(aid)s)"))
            params["at"], params["aid"] = after
        query = sql.SQL(
            "SELECT {cols} FROM documents WHERE {where}"
            " ORDER BY updated_at DESC, document_id DESC LIMIT %(limit)s"
        ).format(cols=column_list(DOCUMENT_COLUMNS), where=sql.SQL(" AND ").join(where))
        async with self.pool.connection() as c:
            return await (await c.execute(query, params)).fetchall()

    async def chunks(
        self, tenant_id: str, document_id: str, *, after: int = -1, limit: int = 50
    ) -> list[dict[str, Any]]:
        """The document's chunks in order, ``chunk_index`` > ``after``."""
        query = sql.SQL(
            "SELECT id, content, data FROM memory_items WHERE {chunks}"
            " AND (data->>'chunk_index')::integer > %(after)s"
            " ORDER BY (data->>'chunk_index')::integer LIMIT %(limit)s"
        ).format(chunks=_CHUNKS_OF)
        params = {
            "tenant_id": tenant_id,
            "document_id": document_id,
            "after": after,
            "limit": limit,
        }
        async with self.pool.connection() as c:
            return await (await c.execute(query, params)).fetchall()

    async def versions(self, tenant_id: str, document_id: str) -> list[dict[str, Any]]:
        async with self.pool.connection() as c:
            cur = await c.execute(
                "SELECT version, content_sha256, chunk_count, chars, actor, created_at, replaced_at"
                " FROM document_versions WHERE tenant_id = %(t)s AND document_id = %(d)s"
                " ORDER BY version",
                {"t": tenant_id, "d": document_id},
            )
            return await cur.fetchall()

    # ---------- deletes ----------

    async def delete(self, tenant_id: str, document_id: str, actor: str | None) -> int | None:
        """The document, its chunks and its versions, in one transaction; None if absent."""
        async with self.pool.connection() as conn, conn.transaction():
            # Its open ingest jobs first (none re-adds it), locking them in the order a
            # job's swap does (job row, then the document): a swap under way commits first.
            await DocumentJobStore.drop_document(conn, tenant_id, document_id)
            head = await self.lock(conn, tenant_id, document_id)
            if head is None:
                return None
            await conn.execute(events.QUIET)  # one document event, not one per chunk
            n = await self.remove_chunks(conn, tenant_id, document_id, actor)
            await conn.execute(events.LOUD)
            await events.emit(
                conn,
                tenant_id,
                "document.deleted",
                user_id=head["user_id"],
                agent_id=head["agent_id"],
                data={"document_id": document_id, "chunks": n},
            )
            params = {"t": tenant_id, "d": document_id}
            await conn.execute(
                "DELETE FROM documents WHERE tenant_id = %(t)s AND document_id = %(d)s", params
            )
            await conn.execute(
                "DELETE FROM document_versions WHERE tenant_id = %(t)s AND document_id = %(d)s",
                params,
            )
            return n

    @staticmethod
    async def erase_owner(conn: AsyncConnection, tenant_id: str, owner: str | None) -> int:
        """Heads and versions of ``owner``'s documents (None: the whole tenant's); their
        chunks go with the owner's memories (the forget deletes those)."""
        where = "tenant_id = %(t)s" + ("" if owner is None else " AND owner = %(o)s")
        params = {"t": tenant_id, "o": owner}
        cur = await conn.execute(f"DELETE FROM documents WHERE {where}", params)  # noqa: S608
        await conn.execute(f"DELETE FROM document_versions WHERE {where}", params)  # noqa: S608
        return cur.rowcount
