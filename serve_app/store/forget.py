"""Forget (erasure) and expiry purge, in bounded chunks.

Every chunk is one statement well under the statement timeout, so a user with
hundreds of thousands of memories is forgotten in a loop of short statements
instead of one that can never finish. A memory chunk deletes the items, their
vectors (the active model's table explicitly, other models' by cascade), their
history rows, and bumps the owners' versions with a NOTIFY (caches on every
retriever replica stop using the owner's entry at once and drop it on the NOTIFY).

Crash-safe: the erasure record is renewed between chunks and finished however the
forget ends (error, cancellation); one left by a dead replica stops blocking when its
lease runs out (:class:`serve_app.store.erasure.Erasure`). A retry of the same scope
takes an unfinished record over and deletes what is left. Consolidation's lease on the
owner is revoked before anything is deleted, so a run in flight writes nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store import events
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.documents import DocumentStore
from serve_app.store.erasure import Erasure
from serve_app.store.turns import INFER_PREFIX
from serve_app.store.vectors import table_name
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_ctes

KINDS = (
    "memories",
    "vectors",
    "history",
    "facts",
    "turns",
    "sessions",
    "events",
    "documents",
    "document_jobs",
)


@dataclass(frozen=True)
class Scope:
    """What to forget: a user (optionally one agent or session of theirs), or a tenant."""

    tenant_id: str
    user_id: str | None  # None: the whole tenant
    agent_id: str | None = None
    session_id: str | None = None

    def where(self, columns: tuple[str, ...]) -> tuple[sql.Composable, dict[str, Any]]:
        """Predicate over the named columns this scope constrains (those a table has)."""
        parts: list[sql.Composable] = [sql.SQL("tenant_id = %(tenant_id)s")]
        params: dict[str, Any] = {"tenant_id": self.tenant_id}
        for col, value in (
            ("user_id", self.user_id),
            ("agent_id", self.agent_id),
            ("session_id", self.session_id),
        ):
            if value is not None and col in columns:
                parts.append(sql.SQL("{} = {}").format(sql.Identifier(col), sql.Placeholder(col)))
                params[col] = value
        return sql.SQL(" AND ").join(parts), params

    def turns_where(self) -> tuple[sql.Composable, dict[str, Any]]:
        """The scope's turns: a session's own, and the pending ``infer`` jobs that the
        session's memories would come from (their turns live under ``infer-<hex>`` with
        the session in ``meta``; missed, their memories appeared after the forget)."""
        if self.session_id is None and self.agent_id is None and self.user_id is not None:
            # A whole user: their sessions, and what they said in others' group sessions.
            where, params = self.where(("user_id",))
            said = sql.SQL("(({}) OR (tenant_id = %(tenant_id)s AND speaker_id = %(user_id)s))")
            return said.format(where), params
        if self.session_id is None:
            return self.where(("user_id", "agent_id", "session_id"))
        where, params = Scope(self.tenant_id, self.user_id, self.agent_id).where(
            ("user_id", "agent_id")
        )
        mine = sql.SQL(
            "(session_id = %(session_id)s OR (starts_with(session_id, %(infer)s)"
            " AND meta ->> 'session_id' = %(session_id)s))"
        )
        params.update(session_id=self.session_id, infer=INFER_PREFIX)
        return sql.SQL(" AND ").join([where, mine]), params


# Expiry's events: one memory.deleted per purged memory (``data.reason`` "expired"), in
# the statement that deletes it, so each expired memory yields exactly one; its earlier
# events lose their content, as an API delete's do. A forget's deletes emit none (it
# announces itself once, with forget.completed, and then deletes the owner's events).
_EXPIRY_EVENTS = sql.SQL(
    " ev AS (INSERT INTO memory_events (tenant_id, type, user_id, agent_id, session_id, scope,"
    " memory_id, version, actor, data) SELECT %(tenant_id)s, 'memory.deleted', g.user_id,"
    " g.agent_id, g.session_id, g.scope, g.id, g.version, 'expiry',"
    ' \'{"reason": "expired"}\'::jsonb FROM gone g WHERE memserve_events_on()'
    " ORDER BY g.id RETURNING 1),"
    " blanked AS (UPDATE memory_events e SET content = NULL FROM gone g"
    " WHERE e.tenant_id = %(tenant_id)s AND e.memory_id = g.id AND e.content IS NOT NULL"
    " RETURNING 1),"
)


def _memory_chunk(
    vectors: sql.Identifier, where: sql.Composable, *, expiry: bool = False
) -> sql.Composed:
    """Delete up to ``%(batch)s`` memories ``where`` selects (vectors, history, bumps);
    ``expiry``: the purge of expired ones, which emits their memory.deleted events."""
    return sql.SQL(
        "WITH batch AS (SELECT id FROM memory_items WHERE {where} LIMIT %(batch)s),"
        " vecs AS (DELETE FROM {v} v USING batch b WHERE v.item_id = b.id RETURNING 1),"
        " gone AS (DELETE FROM memory_items i USING batch b WHERE i.id = b.id"
        " RETURNING i.id, i.owner, i.user_id, i.agent_id, i.session_id, i.scope, i.version),"
        " hist AS (DELETE FROM memory_history h USING gone g"
        " WHERE h.tenant_id = %(tenant_id)s AND h.memory_id = g.id RETURNING 1),"
        "{events}"
        " {bump}"
        " SELECT (SELECT count(*) FROM gone) AS memories, (SELECT count(*) FROM vecs) AS vectors,"
        " (SELECT count(*) FROM hist) AS history, {notified} AS notified"
    ).format(
        where=where,
        v=vectors,
        events=_EXPIRY_EVENTS if expiry else sql.SQL(""),
        bump=bump_ctes(sql.SQL("SELECT owner FROM gone")),
        notified=NOTIFIED,
    )


def _rows_chunk(table: str, key: str, where: sql.Composable) -> sql.Composed:
    """Delete up to ``%(batch)s`` rows of ``table`` matching ``where`` (by its key column)."""
    t, k = sql.Identifier(table), sql.Identifier(key)
    return sql.SQL(
        "WITH gone AS (DELETE FROM {t} WHERE {k} IN (SELECT {k} FROM {t} WHERE {w}"
        " LIMIT %(batch)s) RETURNING 1) SELECT count(*) AS n FROM gone"
    ).format(t=t, k=k, w=where)


# Consolidation's lease on the scope's owners (a whole tenant: all of them), revoked:
# the UPDATE waits for a write that holds the lease row (``Lease.hold``) to commit, so
# it lands before the deletes; later writes of that run find their token gone.
_REVOKE = (
    "UPDATE consolidation_state SET claimed_until = NULL, claim_token = NULL"
    " WHERE tenant_id = %(tenant_id)s AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)"
    " AND claim_token IS NOT NULL"
)


class ForgetStore:
    """Chunked deletes of everything the service keeps about a user, session or tenant."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        *,
        batch: int = 2000,
        lease_s: float = 60.0,
        concurrency: int = 2,
    ) -> None:
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))
        self.batch = batch
        self.lease_s = lease_s  # the erasure's lease (renewed between chunks)
        # A forget holds a pooled connection from start to end: without a bound, ten large
        # ones at once held a replica's whole pool. Queued forgets wait here, holding none.
        self._running = asyncio.Semaphore(concurrency)

    async def forget(self, scope: Scope) -> dict[str, int]:
        """Delete the scope's data; counts per kind (see ``KINDS``). At most
        ``concurrency`` forgets of this store run at once; the others wait their turn."""
        async with self._running:
            return await self._forget(scope)

    async def _forget(self, scope: Scope) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        held: Erasure | None = None
        try:
            async with self.pool.connection() as conn:
                held = await Erasure.start(
                    conn,
                    scope.tenant_id,
                    scope.user_id,
                    scope.agent_id,
                    scope.session_id,
                    lease_s=self.lease_s,
                )
                await self._erase(conn, scope, held, counts)
                await held.finish(conn)
                await self._announce(conn, scope, counts)
        finally:
            if held is not None:
                await held.close(self.pool)  # failed or cancelled: finish it all the same
        return counts

    async def _erase(
        self, conn: AsyncConnection, scope: Scope, held: Erasure, counts: dict[str, int]
    ) -> None:
        await conn.execute(_REVOKE, {"tenant_id": scope.tenant_id, "user_id": scope.user_id})
        # The queue first: nothing of the scope is picked up for extraction meanwhile.
        where, params = scope.turns_where()
        counts["turns"] = await self._rows(conn, held, "session_turns", "id", where, params)
        counts["sessions"] = await self._sessions(conn, scope)
        counts["document_jobs"] = await self._document_jobs(conn, scope)
        await self._memories(conn, held, scope, counts)  # document chunks too
        counts["documents"] = await self._documents(conn, scope)
        counts["history"] += await self._history(conn, held, scope)
        counts["facts"] = await self._facts(conn, held, scope)
        counts["events"] = await self._events(conn, held, scope)
        await self._bump_scope(conn, scope)

    async def _events(self, conn: AsyncConnection, held: Erasure, scope: Scope) -> int:
        """The scope's events (content and all, delivered or not), except earlier
        ``forget.completed`` notices, which carry none."""
        where, params = scope.where(("user_id", "agent_id", "session_id"))
        where = sql.SQL("{} AND type <> 'forget.completed'").format(where)
        await held.heartbeat(conn)
        return await events.EventStore(self.pool).forget(conn, where, params, batch=self.batch)

    async def _announce(self, conn: AsyncConnection, scope: Scope, counts: dict[str, int]) -> None:
        """One ``forget.completed`` (no content), once the forget has finished."""
        await events.emit(
            conn,
            scope.tenant_id,
            "forget.completed",
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_id=scope.session_id,
            data=dict(counts),
        )

    async def _memories(
        self, conn: AsyncConnection, held: Erasure, scope: Scope, counts: dict[str, int]
    ) -> None:
        where, params = scope.where(("user_id", "agent_id", "session_id"))
        query = _memory_chunk(self.vectors, where)
        params.update(batch=self.batch, channel=CHANGES_CHANNEL)
        while True:
            await held.heartbeat(conn)
            cur = await conn.execute(query, params)
            row = await cur.fetchone()
            for kind in ("memories", "vectors", "history"):
                counts[kind] += row[kind]
            if row["memories"] < self.batch:
                return

    async def _rows(
        self,
        conn: AsyncConnection,
        held: Erasure,
        table: str,
        key: str,
        where: sql.Composable,
        params: dict[str, Any],
        *,
        quiet: bool = False,
    ) -> int:
        """``quiet``: the deletes emit no events (a forget announces itself once)."""
        query, total = _rows_chunk(table, key, where), 0
        while True:
            await held.heartbeat(conn)
            async with conn.transaction():
                if quiet:
                    await conn.execute(events.QUIET)
                cur = await conn.execute(query, {**params, "batch": self.batch})
                n = (await cur.fetchone())["n"]
            total += n
            if n < self.batch:
                return total

    async def _documents(self, conn: AsyncConnection, scope: Scope) -> int:
        """The heads and versions of the scope's documents: a user's own (not
        when one agent or session of theirs is forgotten), or all of a tenant's; their
        chunks went with the memories."""
        if scope.agent_id is not None or scope.session_id is not None:
            return 0
        return await DocumentStore.erase_owner(conn, scope.tenant_id, scope.user_id)

    async def _document_jobs(self, conn: AsyncConnection, scope: Scope) -> int:
        """The scope's document ingest jobs, before its chunks: a job being written waits
        for (its job row lock) or loses to this, so none lands after the deletes."""
        if scope.agent_id is not None or scope.session_id is not None:
            return 0
        return await DocumentJobStore.drop_owner(conn, scope.tenant_id, scope.user_id)

    async def _sessions(self, conn: AsyncConnection, scope: Scope) -> int:
        where, params = scope.where(("user_id", "agent_id", "session_id"))
        cur = await conn.execute(
            sql.SQL("DELETE FROM session_state WHERE {}").format(where), params
        )
        return cur.rowcount

    async def _history(self, conn: AsyncConnection, held: Erasure, scope: Scope) -> int:
        """Events left by memories deleted earlier (whole user or tenant only)."""
        if scope.agent_id is not None or scope.session_id is not None:
            return 0
        where, params = scope.where(("user_id",))
        return await self._rows(conn, held, "memory_history", "id", where, params)

    async def _facts(self, conn: AsyncConnection, held: Erasure, scope: Scope) -> int:
        """A user's facts; a session forget drops the facts learnt in that session."""
        if scope.agent_id is not None:
            return 0  # facts belong to the user, not to an agent
        where, params = scope.where(("user_id", "session_id"))
        return await self._rows(conn, held, "facts", "id", where, params, quiet=True)

    async def _bump_scope(self, conn: AsyncConnection, scope: Scope) -> None:
        """Bump (and NOTIFY) the scope's owners even if no memory was left to delete."""
        if scope.user_id is not None:
            owners = sql.SQL("SELECT %(owner)s::text AS owner")
        else:
            owners = sql.SQL(
                "SELECT owner FROM memory_owner_versions WHERE tenant_id = %(tenant_id)s"
            )
        await conn.execute(
            sql.SQL("WITH {} SELECT {}").format(bump_ctes(owners), NOTIFIED),
            {"tenant_id": scope.tenant_id, "owner": scope.user_id, "channel": CHANGES_CHANNEL},
        )

    # ---------- expiry ----------

    async def purge_expired(
        self, *, batch: int, max_batches: int, conn: AsyncConnection | None = None
    ) -> int:
        """Delete up to ``batch * max_batches`` expired memories (vectors, history, bumps),
        each with one memory.deleted event (``data.reason`` "expired").

        ``conn``: the caller's connection (the purger's, which holds its lock), else one
        from the pool.
        """
        if conn is None:
            async with self.pool.connection() as conn:
                return await self.purge_expired(batch=batch, max_batches=max_batches, conn=conn)
        where = sql.SQL("expires_at <= now()")
        total = 0
        for _ in range(max_batches):
            n = await self._purge_chunk(conn, where, batch)
            total += n
            if n < batch:
                break
        return total

    async def _purge_chunk(self, conn: AsyncConnection, where: sql.Composable, batch: int) -> int:
        """One chunk of expired rows, grouped per tenant (history and bumps are per tenant)."""
        cur = await conn.execute(
            sql.SQL(
                "SELECT DISTINCT tenant_id FROM (SELECT tenant_id FROM memory_items"
                " WHERE {} ORDER BY expires_at LIMIT %(batch)s) s"
            ).format(where),
            {"batch": batch},
        )
        total = 0
        for row in await cur.fetchall():
            tenant_where = sql.SQL("{} AND tenant_id = %(tenant_id)s").format(where)
            cur = await conn.execute(
                _memory_chunk(self.vectors, tenant_where, expiry=True),
                {"tenant_id": row["tenant_id"], "batch": batch, "channel": CHANGES_CHANNEL},
            )
            total += (await cur.fetchone())["memories"]
        return total
