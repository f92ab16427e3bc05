"""``memory_items`` with their vectors, history and owner versions.

Every statement carries ``tenant_id`` and the owner, so a memory of another
user or tenant is indistinguishable from a missing one. Each write is one
statement (data-modifying CTEs): the items, their vectors, their history and
the owner-version bump with its NOTIFY go in one round trip and commit or fail
together (the pool's connections are in autocommit: one statement is one
transaction). A batch of any size is still one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store import erasure, history, quota
from serve_app.store.cursor import InvalidCursor, decode_cursor, encode_cursor
from serve_app.store.forget import Scope
from serve_app.store.memory_index import VersionConflict, using
from serve_app.store.records import (
    MEMORY_COLUMNS,
    NewMemory,
    Owner,
    column_list,
    live,
    owner_key,
)
from serve_app.store.vectors import table_name
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_ctes
from serve_app.text import dedupe_hash

__all__ = ["CHANGES_CHANNEL", "InvalidCursor", "MemoryStore", "VersionConflict"]

# What an add binds per item: (column, element type of the array it travels in).
# ``tags`` travels as jsonb because a text[][] cannot hold rows of different lengths.
_ADD_INPUT: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("user_id", "text"),
    ("agent_id", "text"),
    ("session_id", "text"),
    ("scope", "text"),
    ("type", "text"),
    ("content", "text"),
    ("data", "jsonb"),
    ("tags", "jsonb"),
    ("metadata", "jsonb"),
    ("importance", "real"),
    ("confidence", "real"),
    ("dedupe_hash", "text"),
    ("source", "text"),
    ("expires_at", "timestamptz"),
    ("owner", "text"),  # vector table only (memory_items computes its own)
    ("embedding", "vector"),  # vector table only
)
_ITEM_INPUT = tuple(c for c, _ in _ADD_INPUT if c not in ("owner", "embedding"))
UPDATABLE = frozenset(
    {"content", "tags", "metadata", "importance", "type", "confidence", "data"}
    | {"expires_at", "status"}
)


# A row that has not expired; and one memory by id, if it is the owner's and live.
_LIVE = live()
_OWNED_LIVE_ID = (
    "id = %(id)s AND tenant_id = %(tenant_id)s"
    " AND user_id IS NOT DISTINCT FROM %(user_id)s AND " + _LIVE
)


def _add_statement(vectors: sql.Identifier, gate: sql.Composable) -> sql.Composed:
    """One statement for a whole batch: items (in input order: ``seq`` is write order),
    vectors, ADD history and the owner bump, fed by column arrays unnested together.
    ``gate`` (quota, erasure guard) false: the statement writes nothing."""
    arrays = sql.SQL(", ").join(
        sql.SQL("{}::{}[]").format(sql.Placeholder(c), sql.SQL(t)) for c, t in _ADD_INPUT
    )
    names = column_list([c for c, _ in _ADD_INPUT])
    values = sql.SQL(", ").join(
        sql.SQL("ARRAY(SELECT jsonb_array_elements_text(s.tags))")
        if c == "tags"
        else sql.Identifier("s", c)
        for c in _ITEM_INPUT
    )
    return sql.SQL(
        "WITH src AS (SELECT * FROM unnest({arrays}) WITH ORDINALITY AS s({names}, ord)"
        " WHERE {gate}),"
        " items AS (INSERT INTO memory_items (tenant_id, {item_cols})"
        " SELECT %(tenant_id)s, {values} FROM src s ORDER BY s.ord RETURNING {returning}),"
        " vecs AS (INSERT INTO {v} (item_id, tenant_id, owner, embedding)"
        " SELECT s.id, %(tenant_id)s, s.owner, s.embedding FROM src s),"
        " {log}"
        " SELECT items.*, {notified} AS notified FROM items"
    ).format(
        arrays=arrays,
        names=names,
        gate=gate,
        item_cols=column_list(_ITEM_INPUT),
        values=values,
        returning=column_list(MEMORY_COLUMNS),
        v=vectors,
        log=_log_and_bump("src", "ADD", "content", order="ord"),
        notified=NOTIFIED,
    )


def _log_and_bump(rows: str, event: str, new_content: str, *, order: str = "id") -> sql.Composed:
    """CTEs logging ``event`` for each row of CTE ``rows`` (no old content) and bumping
    the owners of those rows (``rows`` has ``id, user_id, owner`` and ``new_content``)."""
    events = sql.SQL(
        "SELECT id AS memory_id, user_id, {event}::text AS event, NULL::text AS old_content,"
        " {new}::text AS new_content FROM {rows} ORDER BY {order}"
    ).format(
        event=sql.Literal(event),
        new=sql.SQL(new_content),
        rows=sql.Identifier(rows),
        order=sql.Identifier(order),
    )
    return sql.SQL("{}, {}").format(
        history.record_cte("hist", events),
        bump_ctes(sql.SQL("SELECT owner FROM {}").format(sql.Identifier(rows))),
    )


def _add_params(owner: Owner, items: Sequence[NewMemory], embeddings: Any) -> dict[str, Any]:
    """Column arrays for ``_add_statement`` (ids are made here so rows map back to inputs)."""
    cols: dict[str, list[Any]] = {c: [] for c, _ in _ADD_INPUT}
    for item, vector in zip(items, embeddings, strict=True):
        user_id = owner.user_id if item.scope in ("user", "session") else None
        row = {
            "id": uuid.uuid4(),
            "user_id": user_id,
            "agent_id": item.agent_id,
            "session_id": item.session_id,
            "scope": item.scope,
            "type": item.type,
            "content": item.content,
            "data": Jsonb(item.data),
            "tags": Jsonb(list(item.tags)),
            "metadata": Jsonb(item.metadata),
            "importance": item.importance,
            "confidence": item.confidence,
            "dedupe_hash": dedupe_hash(item.content),
            "source": item.source,
            "expires_at": item.expires_at,
            "owner": owner_key(user_id, item.scope, item.agent_id),
            "embedding": np.asarray(vector, dtype=np.float32),
        }
        for c, values in cols.items():
            values.append(row[c])
    return {**cols, "tenant_id": owner.tenant_id, "channel": CHANGES_CHANNEL}


class MemoryStore:
    """Async data access for memories of one embedding model's vector table."""

    def __init__(
        self, pool: AsyncConnectionPool, model_slug: str, limits: quota.Quota | None = None
    ) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))
        self.quota = limits if limits is not None and limits.active else None
        gate = quota.GATE if self.quota else sql.SQL("TRUE")
        guarded = sql.SQL("{} AND {}").format(gate, erasure.clause(sql.SQL("s.agent_id")))
        # [outside extraction work, inside it (erasure guard: see serve_app.store.erasure)]
        self._add_sql = [_add_statement(self.vectors, gate), _add_statement(self.vectors, guarded)]

    # ---------- writes ----------

    async def add(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        embeddings: np.ndarray,
        *,
        actor: str | None = None,
        conn: AsyncConnection | None = None,
    ) -> list[dict[str, Any]]:
        """Insert items verbatim with their vectors and ADD history: one atomic statement.

        Rows come back in input order (``seq`` follows it); ``conn``: the caller's transaction.
        """
        if len(items) != len(embeddings):
            raise ValueError(f"{len(items)} items but {len(embeddings)} embeddings")
        if not items:
            return []
        params = _add_params(owner, items, embeddings)
        params["actor"] = actor
        if self.quota:
            params.update(quota.params(self.quota, owner, items))
        guard_params = erasure.params()
        params.update(guard_params)
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(self._add_sql[bool(guard_params)], params)
            rows = {r["id"]: r for r in await cur.fetchall()}
            if not rows and self.quota:  # refused: say which quota
                refused = await quota.exceeded(conn, self.quota, owner, items)
                if refused is not None:
                    raise refused
        out = [rows[i] for i in params["id"] if i in rows]
        for r in out:
            del r["notified"]
        return out

    async def update(
        self,
        owner: Owner,
        item_id: uuid.UUID,
        changes: dict[str, Any],
        embedding: np.ndarray | None,
        *,
        actor: str | None = None,
        event: str = "UPDATE",
        expected_version: int | None = None,
        conn: AsyncConnection | None = None,
    ) -> dict[str, Any] | None:
        """Partial update (the caller re-embeds); bumps ``version``, and raises
        :class:`VersionConflict` when the row is not at ``expected_version``."""
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}")
        params: dict[str, Any] = {
            "id": item_id,
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "event": event,
            "actor": actor,
            "channel": CHANGES_CHANNEL,
            "expected": expected_version,
        }
        sets = [sql.SQL("updated_at = now()"), sql.SQL("version = i.version + 1")]
        for key, value in changes.items():
            sets.append(
                sql.SQL("{} = {}").format(sql.Identifier(key), sql.Placeholder(f"new_{key}"))
            )
            params[f"new_{key}"] = Jsonb(value) if key in ("metadata", "data") else value
        if "content" in changes:
            sets.append(sql.SQL("dedupe_hash = %(new_dedupe_hash)s"))
            params["new_dedupe_hash"] = dedupe_hash(changes["content"])
        guard_params = erasure.params()  # extraction work: nothing if its owner was forgotten
        params.update(guard_params)
        revector = sql.SQL("")
        if embedding is not None:
            params["embedding"] = np.asarray(embedding, dtype=np.float32)
            revector = sql.SQL(
                " vec AS (UPDATE {v} v SET embedding = %(embedding)s FROM upd"
                " WHERE v.item_id = upd.id AND v.tenant_id = %(tenant_id)s),"
            ).format(v=self.vectors)
        query = sql.SQL(
            "WITH old AS (SELECT id, user_id, owner, content, version FROM memory_items"
            " WHERE id = %(id)s AND tenant_id = %(tenant_id)s"
            " AND user_id IS NOT DISTINCT FROM %(user_id)s AND " + _LIVE + " AND {guard}"
            " FOR UPDATE),"
            " upd AS (UPDATE memory_items i SET {sets} FROM old WHERE i.id = old.id"
            " AND (%(expected)s::int IS NULL OR i.version = %(expected)s)"
            " RETURNING {returning}),{revector} {history}, {bump}"
            " SELECT upd.*, {notified} AS notified, (SELECT version FROM old) AS current_version"
            " FROM (SELECT 1) one LEFT JOIN upd ON true"
        ).format(
            sets=sql.SQL(", ").join(sets),
            guard=erasure.clause(sql.SQL("agent_id")) if guard_params else sql.SQL("TRUE"),
            returning=column_list(MEMORY_COLUMNS, "i"),
            revector=revector,
            history=history.record_cte(
                "hist",
                sql.SQL(
                    "SELECT old.id AS memory_id, old.user_id, %(event)s::text AS event,"
                    " old.content AS old_content, upd.content AS new_content"
                    " FROM old JOIN upd ON upd.id = old.id"
                ),
            ),
            bump=bump_ctes(sql.SQL("SELECT old.owner FROM old JOIN upd ON upd.id = old.id")),
            notified=NOTIFIED,
        )
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(query, params)
            row = await cur.fetchone()
        current = row.pop("current_version")
        del row["notified"]
        if row["id"] is None and current is not None:
            raise VersionConflict(current)
        return row if row["id"] is not None else None

    async def delete(self, owner: Owner, item_id: uuid.UUID, *, actor: str | None = None) -> bool:
        """Delete one memory; its earlier history loses its content (right to be forgotten)."""
        where = sql.SQL(
            "id = %(id)s AND tenant_id = %(tenant_id)s AND user_id IS NOT DISTINCT FROM %(user_id)s"
        )
        params = {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id}
        return await self._delete_where(where, params, actor) > 0

    async def delete_scope(
        self,
        owner: Owner,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        actor: str | None = None,
    ) -> int:
        """Delete the owner's memories, optionally narrowed to an agent and/or session."""
        if owner.user_id is None:
            return 0
        scope = Scope(owner.tenant_id, owner.user_id, agent_id, session_id)
        where, params = scope.where(("user_id", "agent_id", "session_id"))
        return await self._delete_where(where, params, actor)

    async def _delete_where(
        self, where: sql.Composable, params: dict[str, Any], actor: str | None
    ) -> int:
        """Delete matching items (vectors cascade), forget and log them, bump: one statement."""
        query = sql.SQL(
            "WITH gone AS (DELETE FROM memory_items WHERE {where} RETURNING id, user_id, owner),"
            " {forget}, {log}"
            " SELECT (SELECT count(*) FROM gone) AS deleted, {notified} AS notified"
        ).format(
            where=where,
            forget=history.forget_cte("forgotten", sql.SQL("SELECT id FROM gone")),
            log=_log_and_bump("gone", "DELETE", "NULL"),
            notified=NOTIFIED,
        )
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {**params, "actor": actor, "channel": CHANGES_CHANNEL})
            return (await cur.fetchone())["deleted"]

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
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first, keyset-paginated on (created_at, id); expired items are hidden."""
        where = [
            sql.SQL("tenant_id = %(tenant_id)s"),
            sql.SQL(_LIVE),
            # None: the tenant's shared memories (two forms: IS NOT DISTINCT FROM is unindexable)
            sql.SQL("user_id IS NULL" if owner.user_id is None else "user_id = %(user_id)s"),
        ]
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "limit": limit + 1,
        }
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

    async def history(self, owner: Owner, item_id: uuid.UUID) -> list[dict[str, Any]] | None:
        """The memory's events, oldest first; None when the memory is not the owner's."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM memory_items WHERE " + _OWNED_LIVE_ID,
                {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id},
            )
            if await cur.fetchone() is None:
                return None
            return await history.events(conn, owner.tenant_id, item_id)

    async def count(self, tenant_id: str | None = None) -> int:
        """Row count (tests and metrics)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM memory_items"
                " WHERE %(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s",
                {"tenant_id": tenant_id},
            )
            return (await cur.fetchone())["n"]
