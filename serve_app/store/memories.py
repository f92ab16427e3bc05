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
from datetime import datetime
from typing import Any, Protocol

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store import erasure, history, quota, supersede
from serve_app.store.cursor import InvalidCursor, decode_cursor, encode_cursor
from serve_app.store.forget import Scope
from serve_app.store.memory_index import VersionConflict, using
from serve_app.store.memory_writes import (
    add_params,
    add_statement,
    delete_statement,
)
from serve_app.store.records import (
    MEMORY_COLUMNS,
    NewMemory,
    Owner,
    column_list,
    live,
    valid,
)
from serve_app.store.vectors import table_name
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_ctes
from serve_app.text import dedupe_hash

__all__ = ["CHANGES_CHANNEL", "InvalidCursor", "MemoryStore", "VersionConflict"]

UPDATABLE = frozenset(
    {"content", "tags", "metadata", "importance", "type", "confidence", "data"}
    | {"expires_at", "status"}
    | {"valid_from", "valid_until", "superseded_by"}  # validity (event time)
    | {"pinned", "profile_class"}  # the profile
)


# A row that has not expired; and one memory by id, if it is the owner's and live.
_LIVE = live()
# A document's chunk is not a memory: it changes and goes with its document (``POST`` /
# ``DELETE /v1/documents``), never alone through the memory routes, which would leave the
# document's head describing chunks that are not there.
_NOT_A_CHUNK = " AND type <> 'document_chunk'"

_OWNED_LIVE_ID = (
    "id = %(id)s AND tenant_id = %(tenant_id)s"
    " AND user_id IS NOT DISTINCT FROM %(user_id)s AND " + _LIVE
)


# The erasure guard of a batch add (any voided row refuses all of it); binds the
# batch's ``agent_id``/``session_id`` arrays and :func:`erasure.params`.
BATCH_GUARD = sql.SQL(
    "NOT EXISTS (SELECT 1 FROM unnest(%(agent_id)s::text[], %(session_id)s::text[])"
    " AS r(agent_id, session_id) WHERE NOT {})"
).format(erasure.clause(sql.SQL("r.agent_id"), sql.SQL("r.session_id")))


class ProfileClasses(Protocol):
    """Gives memories their profile class. The classifier (serve_app/profile/classify.py)
    embeds and reads cues; it is passed in by whoever builds the store, so the store
    knows no classification."""

    async def classify_many(
        self, texts: Sequence[str], types: Sequence[str], vectors: Any
    ) -> list[str | None]: ...


class MemoryStore:
    """Async data access for memories of one embedding model's vector table."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        classifier: ProfileClasses | None = None,
    ) -> None:
        """``classifier``: gives written memories without one their profile class (None:
        they keep none)."""
        self.pool = pool
        self.classifier = classifier
        self.vectors = sql.Identifier(table_name(model_slug))
        gate = sql.SQL("{} AND {}").format(quota.GATE, BATCH_GUARD)
        self._add_sql = add_statement(self.vectors, gate)
        self._supersede_sql = add_statement(self.vectors, gate, supersede=True)

    # ---------- writes: only through serve_app.store.guarded.GuardedWriter ----------

    async def _raw_add(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        embeddings: np.ndarray,
        *,
        actor: str | None = None,
        limits: quota.Quota | None = None,
        conn: AsyncConnection | None = None,
        earlier: Sequence[NewMemory] = (),
    ) -> list[dict[str, Any]]:
        """Insert items verbatim with their vectors and ADD history: one atomic statement.

        All rows or none (quota, erasure guard: the writer says why); rows come back in
        input order (``seq`` follows it); ``conn``: the caller's transaction; ``earlier``:
        items it added uncounted (:func:`quota.params`).
        """
        if len(items) != len(embeddings):
            raise ValueError(f"{len(items)} items but {len(embeddings)} embeddings")
        if not items:
            return []
        todo = [i for i, m in enumerate(items) if m.profile_class is None]
        classes: list[str | None] = [None] * len(items)
        if todo and self.classifier is not None:
            found = await self.classifier.classify_many(
                [items[i].content for i in todo],
                [items[i].type for i in todo],
                [embeddings[i] for i in todo],
            )
            for i, c in zip(todo, found, strict=True):
                classes[i] = c
        params = add_params(owner, items, embeddings, classes)
        params["actor"] = actor
        params.update(quota.params(limits or quota.Quota(), owner, items, earlier))
        params.update(erasure.params(owner.user_id))
        async with using(self.pool, conn) as conn:
            retire = supersede.targets(items)  # raises SupersedeRefused on a repeated id
            params.update(supersede.params(owner, retire))
            cur = await conn.execute(self._supersede_sql if retire else self._add_sql, params)
            rows = {r["id"]: r for r in await cur.fetchall()}
            if not rows and retire:  # refused: unknown, foreign or retired targets?
                refused = await supersede.refusal(conn, owner, retire)
                if refused is not None:
                    raise refused
        out = [rows[i] for i in params["id"] if i in rows]
        for r in out:
            del r["notified"]
        return out

    async def _raw_update(
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
        :class:`VersionConflict` when the row is not at ``expected_version``. A document's
        chunk is not updated here (``_NOT_A_CHUNK``): None, as for a missing id."""
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}")
        classify = self.classifier is not None and embedding is not None
        if "content" in changes and classify and "profile_class" not in changes:
            # New words, new class (the type it is written with decides with them).
            kind = changes.get("type") or "semantic"
            found = await self.classifier.classify_many([changes["content"]], [kind], [embedding])
            changes = {**changes, "profile_class": found[0]}
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
        params.update(erasure.params(owner.user_id))  # a voiding forget: no row
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
            " AND user_id IS NOT DISTINCT FROM %(user_id)s AND "
            + _LIVE
            + _NOT_A_CHUNK
            + " AND {guard} FOR UPDATE),"
            " upd AS (UPDATE memory_items i SET {sets} FROM old WHERE i.id = old.id"
            " AND (%(expected)s::int IS NULL OR i.version = %(expected)s)"
            " RETURNING {returning}),{revector} {history}, {bump}"
            " SELECT upd.*, {notified} AS notified, (SELECT version FROM old) AS current_version"
            " FROM (SELECT 1) one LEFT JOIN upd ON true"
        ).format(
            sets=sql.SQL(", ").join(sets),
            guard=erasure.clause(sql.SQL("agent_id"), sql.SQL("session_id")),
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

    async def _raw_delete(
        self, owner: Owner, item_id: uuid.UUID, *, actor: str | None = None
    ) -> bool:
        """Delete one memory; its earlier history loses its content (right to be forgotten).
        A document's chunk is not one (``_NOT_A_CHUNK``)."""
        where = sql.SQL(
            "id = %(id)s AND tenant_id = %(tenant_id)s AND user_id IS NOT DISTINCT FROM %(user_id)s"
            + _NOT_A_CHUNK
        )
        params = {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id}
        return await self._delete_where(where, params, actor) > 0

    async def _raw_delete_scope(
        self,
        owner: Owner,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        actor: str | None = None,
    ) -> int:
        """Delete the owner's memories, optionally narrowed to an agent and/or session.

        The shared owner (``user_id`` None) has one scope to delete: an agent's shared
        (``@agent:<id>``) memories of the tenant; org memories go by id only."""
        if owner.user_id is None:
            if agent_id is None or session_id is not None:
                return 0
            where = sql.SQL(
                "tenant_id = %(tenant_id)s AND scope = 'agent' AND agent_id = %(agent_id)s"
            )
            params = {"tenant_id": owner.tenant_id, "agent_id": agent_id}
            return await self._delete_where(where, params, actor)
        scope = Scope(owner.tenant_id, owner.user_id, agent_id, session_id)
        where, params = scope.where(("user_id", "agent_id", "session_id"))
        return await self._delete_where(where, params, actor)

    async def _delete_where(
        self, where: sql.Composable, params: dict[str, Any], actor: str | None
    ) -> int:
        """Delete matching items (vectors cascade), forget and log them, bump: one statement."""
        query = delete_statement(where)
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
