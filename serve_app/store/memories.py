"""Memory items, their vectors and their audit history.

Every statement carries ``tenant_id`` and the owner, so a memory of another
user or tenant is indistinguishable from a missing one. Each write is one
transaction that also appends history and bumps the owner's version (which
caches use to stay fresh; a NOTIFY goes out on commit).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import MEMORY_COLUMNS, NewMemory, Owner, owner_key
from serve_app.store.vectors import table_name
from serve_app.text import dedupe_hash

CHANGES_CHANNEL = "memserve_changes"


class InvalidCursor(ValueError):
    pass


def encode_cursor(created_at: datetime, item_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(item_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, item = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(created), uuid.UUID(item)
    except Exception as exc:  # any malformed cursor is the caller's error
        raise InvalidCursor("invalid cursor") from exc


class MemoryStore:
    """Async data access for memories of one embedding model's vector table."""

    def __init__(self, pool: AsyncConnectionPool, model_slug: str) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))

    # ---------- writes ----------

    async def add(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        embeddings: np.ndarray,
        *,
        actor: str | None = None,
    ) -> list[dict[str, Any]]:
        """Insert items verbatim with their vectors and ADD history, atomically."""
        rows: list[dict[str, Any]] = []
        async with self.pool.connection() as conn, conn.transaction():
            for item, vector in zip(items, embeddings, strict=True):
                rows.append(await self._insert(conn, owner, item, vector, actor))
            await self._bump(conn, owner.tenant_id, {r["_owner"] for r in rows})
        for r in rows:
            r.pop("_owner", None)
        return rows

    async def _insert(
        self,
        conn: AsyncConnection,
        owner: Owner,
        item: NewMemory,
        vector: np.ndarray,
        actor: str | None,
    ) -> dict[str, Any]:
        item_id = uuid.uuid4()
        user_id = owner.user_id if item.scope in ("user", "session") else None
        okey = owner_key(user_id, item.scope, item.agent_id)
        cur = await conn.execute(
            f"INSERT INTO memory_items (id, tenant_id, user_id, agent_id, session_id, scope, type,"
            f" content, data, tags, metadata, importance, confidence, dedupe_hash, source,"
            f" expires_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            f" RETURNING {MEMORY_COLUMNS}",
            (
                item_id,
                owner.tenant_id,
                user_id,
                item.agent_id,
                item.session_id,
                item.scope,
                item.type,
                item.content,
                Jsonb(item.data),
                list(item.tags),
                Jsonb(item.metadata),
                item.importance,
                item.confidence,
                dedupe_hash(item.content),
                item.source,
                item.expires_at,
            ),
        )
        row = await cur.fetchone()
        await conn.execute(
            sql.SQL(
                "INSERT INTO {v} (item_id, tenant_id, owner, embedding) VALUES (%s,%s,%s,%s)"
            ).format(v=self.vectors),
            (item_id, owner.tenant_id, okey, np.asarray(vector, dtype=np.float32)),
        )
        await self._history(
            conn, owner.tenant_id, user_id, item_id, "ADD", None, item.content, actor
        )
        row["_owner"] = okey
        return row

    async def update(
        self,
        owner: Owner,
        item_id: uuid.UUID,
        changes: dict[str, Any],
        embedding: np.ndarray | None,
        *,
        actor: str | None = None,
        event: str = "UPDATE",
    ) -> dict[str, Any] | None:
        """Apply a partial update; re-embedding is the caller's job when content changes."""
        allowed = {"content", "tags", "metadata", "importance", "type", "confidence", "data"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}")
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT id, user_id, scope, agent_id, content FROM memory_items"
                " WHERE id = %s AND tenant_id = %s AND user_id IS NOT DISTINCT FROM %s"
                " FOR UPDATE",
                (item_id, owner.tenant_id, owner.user_id),
            )
            old = await cur.fetchone()
            if old is None:
                return None
            sets = [sql.SQL("updated_at = now()")]
            params: list[Any] = []
            for key, value in changes.items():
                sets.append(sql.SQL("{} = %s").format(sql.Identifier(key)))
                params.append(Jsonb(value) if key in ("metadata", "data") else value)
            if "content" in changes:
                sets.append(sql.SQL("dedupe_hash = %s"))
                params.append(dedupe_hash(changes["content"]))
            cur = await conn.execute(
                sql.SQL("UPDATE memory_items SET {} WHERE id = %s RETURNING {}").format(
                    sql.SQL(", ").join(sets), sql.SQL(MEMORY_COLUMNS)
                ),
                (*params, item_id),
            )
            row = await cur.fetchone()
            if embedding is not None:
                await conn.execute(
                    sql.SQL("UPDATE {v} SET embedding = %s WHERE item_id = %s").format(
                        v=self.vectors
                    ),
                    (np.asarray(embedding, dtype=np.float32), item_id),
                )
            await self._history(
                conn,
                owner.tenant_id,
                old["user_id"],
                item_id,
                event,
                old["content"],
                row["content"],
                actor,
            )
            await self._bump(
                conn, owner.tenant_id, {owner_key(old["user_id"], old["scope"], old["agent_id"])}
            )
        return row

    async def delete(self, owner: Owner, item_id: uuid.UUID, *, actor: str | None = None) -> bool:
        """Delete one memory; its earlier history loses its content (right to be forgotten)."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM memory_items WHERE id = %s AND tenant_id = %s"
                " AND user_id IS NOT DISTINCT FROM %s"
                " RETURNING id, user_id, scope, agent_id",
                (item_id, owner.tenant_id, owner.user_id),
            )
            gone = await cur.fetchall()
            await self._forget(conn, owner.tenant_id, gone, actor)
        return bool(gone)

    async def delete_scope(
        self,
        owner: Owner,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        actor: str | None = None,
    ) -> int:
        """Delete the owner's memories, optionally narrowed to an agent and/or session."""
        where = [sql.SQL("tenant_id = %s"), sql.SQL("user_id = %s")]
        params: list[Any] = [owner.tenant_id, owner.user_id]
        if agent_id is not None:
            where.append(sql.SQL("agent_id = %s"))
            params.append(agent_id)
        if session_id is not None:
            where.append(sql.SQL("session_id = %s"))
            params.append(session_id)
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                sql.SQL(
                    "DELETE FROM memory_items WHERE {} RETURNING id, user_id, scope, agent_id"
                ).format(sql.SQL(" AND ").join(where)),
                params,
            )
            gone = await cur.fetchall()
            await self._forget(conn, owner.tenant_id, gone, actor)
        return len(gone)

    async def _forget(
        self, conn: AsyncConnection, tenant_id: str, gone: list[dict[str, Any]], actor: str | None
    ) -> None:
        if not gone:
            return
        ids = [r["id"] for r in gone]
        await conn.execute(
            "UPDATE memory_history SET old_content = NULL, new_content = NULL,"
            " old_data = NULL, new_data = NULL WHERE tenant_id = %s AND memory_id = ANY(%s)",
            (tenant_id, ids),
        )
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO memory_history (memory_id, tenant_id, user_id, event, actor)"
                " VALUES (%s, %s, %s, 'DELETE', %s)",
                [(r["id"], tenant_id, r["user_id"], actor) for r in gone],
            )
        await self._bump(
            conn, tenant_id, {owner_key(r["user_id"], r["scope"], r["agent_id"]) for r in gone}
        )

    async def _history(
        self,
        conn: AsyncConnection,
        tenant_id: str,
        user_id: str | None,
        item_id: uuid.UUID,
        event: str,
        old: str | None,
        new: str | None,
        actor: str | None,
    ) -> None:
        await conn.execute(
            "INSERT INTO memory_history (memory_id, tenant_id, user_id, event, old_content,"
            " new_content, actor) VALUES (%s,%s,%s,%s,%s,%s,%s)",
            (item_id, tenant_id, user_id, event, old, new, actor),
        )

    async def _bump(self, conn: AsyncConnection, tenant_id: str, owners: set[str]) -> None:
        for okey in sorted(owners):  # sorted: concurrent writers lock rows in one order
            cur = await conn.execute(
                "INSERT INTO memory_owner_versions (tenant_id, owner, version) VALUES (%s,%s,1)"
                " ON CONFLICT (tenant_id, owner) DO UPDATE"
                " SET version = memory_owner_versions.version + 1 RETURNING version",
                (tenant_id, okey),
            )
            version = (await cur.fetchone())["version"]
            await conn.execute(
                "SELECT pg_notify(%s, %s)",
                (CHANGES_CHANNEL, json.dumps([tenant_id, okey, version])),
            )

    # ---------- reads ----------

    async def get(self, owner: Owner, item_id: uuid.UUID) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memory_items"
                " WHERE id = %s AND tenant_id = %s AND user_id IS NOT DISTINCT FROM %s"
                " AND (expires_at IS NULL OR expires_at > now())",
                (item_id, owner.tenant_id, owner.user_id),
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
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, keyset-paginated on (created_at, id); expired items are hidden."""
        where = [sql.SQL("tenant_id = %s"), sql.SQL("(expires_at IS NULL OR expires_at > now())")]
        params: list[Any] = [owner.tenant_id]
        if owner.user_id is None:  # the tenant's shared (agent/org) memories
            where.append(sql.SQL("user_id IS NULL"))
        else:
            where.append(sql.SQL("user_id = %s"))
            params.append(owner.user_id)
        for column, value in (("type", type), ("agent_id", agent_id), ("session_id", session_id)):
            if value is not None:
                where.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
                params.append(value)
        if cursor is not None:
            created_at, last_id = decode_cursor(cursor)
            where.append(sql.SQL("(created_at, id) < (%s, %s)"))
            params.extend([created_at, last_id])
        query = sql.SQL(
            "SELECT {cols} FROM memory_items WHERE {w} ORDER BY created_at DESC, id DESC LIMIT %s"
        ).format(cols=sql.SQL(MEMORY_COLUMNS), w=sql.SQL(" AND ").join(where))
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, (*params, limit + 1))
            rows = await cur.fetchall()
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"])
        return rows, next_cursor

    async def history(self, owner: Owner, item_id: uuid.UUID) -> list[dict[str, Any]] | None:
        """The memory's events, oldest first; None when the memory is not the owner's."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM memory_items WHERE id = %s AND tenant_id = %s"
                " AND user_id IS NOT DISTINCT FROM %s"
                " AND (expires_at IS NULL OR expires_at > now())",
                (item_id, owner.tenant_id, owner.user_id),
            )
            if await cur.fetchone() is None:
                return None
            cur = await conn.execute(
                "SELECT id, memory_id, event, old_content, new_content, actor, created_at"
                " FROM memory_history WHERE tenant_id = %s AND memory_id = %s ORDER BY id",
                (owner.tenant_id, item_id),
            )
            return await cur.fetchall()

    async def count(self, tenant_id: str | None = None) -> int:
        """Row count (tests and metrics)."""
        async with self.pool.connection() as conn:
            if tenant_id is None:
                cur = await conn.execute("SELECT count(*) AS n FROM memory_items")
            else:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM memory_items WHERE tenant_id = %s", (tenant_id,)
                )
            return (await cur.fetchone())["n"]
