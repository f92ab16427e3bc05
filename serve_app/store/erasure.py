"""Erasure records, and the guard that keeps extraction in flight from undoing a forget.

A forget writes a ``memory_erasures`` row when it starts and stamps ``finished_at``
when it is done, also when it fails (:class:`Erasure`). While it runs it renews a lease
(``lease_until``) between its chunks; an erasure left unfinished by a forget that died
counts as finished at its lease expiry (:data:`VOIDS`), so it stops blocking new work
instead of blocking it for ever. Extraction work is marked when it reads its turns
(``TurnStore.claim_pending``/``uncompressed`` call :func:`begin_work` with the
database's clock); every memory or fact write made afterwards in the same asyncio
task carries :func:`guard` in its own statement: it writes nothing when a forget of
that owner (user, user+agent, user+session or the whole tenant) is running or
finished after the work began (consolidation marks its runs the same way). Writes
outside such work (API calls, import) are refused only while a forget of their owner
is running (``GuardedWriter`` answers 409 ``forget_in_progress``): data sent after a
forget is new data. Every writer applies the clause through
:class:`serve_app.store.guarded.GuardedWriter`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

log = logging.getLogger(__name__)

# Erasure ``e`` voids work begun at the moment that follows: it was running then or ran
# after it (unfinished with a live lease, finished later, or its lease ran out later).
# The one spelling of that rule: the write guard and consolidation's lease both use it.
VOIDS = "coalesce(e.finished_at, e.lease_until) > "


@dataclass(frozen=True)
class Work:
    """Extraction work of one session that began at ``since`` (database clock)."""

    tenant_id: str
    user_id: str
    session_id: str
    since: datetime


_work: ContextVar[Work | None] = ContextVar("memserve_extraction_work", default=None)


def begin_work(tenant_id: str, user_id: str, session_id: str, since: datetime) -> None:
    """Mark the current task as extraction work of this session, begun at ``since``."""
    _work.set(Work(tenant_id, user_id, session_id, since))


def end_work() -> None:
    _work.set(None)


def current() -> Work | None:
    return _work.get()


def clause(
    agent_col: sql.Composable | None = None, session_col: sql.Composable | None = None
) -> sql.Composable:
    """``NOT EXISTS (an erasure that voids this write)``, bound by :func:`params`.

    ``agent_col``/``session_col``: SQL of the written row's agent and session (an agent
    or session forget voids only rows of that agent or session; inside extraction work
    the work's session stands for the row's). The statement must bind ``%(tenant_id)s``.
    Inside work an erasure voids the write if it is running or finished after the work
    began; outside work (API writes: data sent after a forget is new data) only while
    it is running (``erasure_since`` NULL: the statement's own clock).
    """
    agent = sql.SQL("")
    if agent_col is not None:
        agent = sql.SQL(" OR e.agent_id = coalesce({}, '')").format(agent_col)
    session = sql.SQL("NULL") if session_col is None else session_col
    return sql.SQL(
        "NOT EXISTS (SELECT 1 FROM memory_erasures e WHERE e.tenant_id = %(tenant_id)s"
        " AND (e.user_id IS NULL OR e.user_id = %(erasure_user)s)"
        " AND (e.session_id = '' OR e.session_id = coalesce(%(erasure_session)s, {session}))"
        " AND (e.agent_id = ''{agent})"
        " AND " + VOIDS + "coalesce(%(erasure_since)s::timestamptz, now()))"
    ).format(agent=agent, session=session)


def params(user_id: str | None) -> dict[str, Any]:
    """Parameters of :func:`clause` for a write of ``user_id``'s data: the current work's
    (user, session, start) inside extraction work, else the user with no start."""
    work = _work.get()
    if work is None:
        return {"erasure_user": user_id, "erasure_session": None, "erasure_since": None}
    if user_id is not None and user_id != work.user_id:
        # A group session's work writing what a speaker said about themselves into that
        # speaker's own memory: their forgets since the work began void it (the session
        # is the host's, so only a forget of the whole speaker applies).
        return {"erasure_user": user_id, "erasure_session": None, "erasure_since": work.since}
    return {
        "erasure_user": work.user_id,
        "erasure_session": work.session_id,
        "erasure_since": work.since,
    }


# ---------- the erasure's lifecycle (one forget) ----------

_START = (
    # Same scope: an unfinished row whose lease ran out is finished at its expiry (what
    # the guard already treats it as); a live one (a forget still running, or one whose
    # client gave up) is taken over under a new token; else a new row.
    "WITH same AS (SELECT id, lease_until FROM memory_erasures WHERE tenant_id = %(t)s"
    " AND user_id IS NOT DISTINCT FROM %(u)s AND agent_id = %(a)s AND session_id = %(s)s"
    " AND finished_at IS NULL FOR UPDATE),"
    " expired AS (UPDATE memory_erasures e SET finished_at = e.lease_until FROM same"
    " WHERE e.id = same.id AND same.lease_until <= now()),"
    " taken AS (UPDATE memory_erasures e SET claim_token = %(token)s,"
    " lease_until = now() + %(lease)s * interval '1 second'"
    " WHERE e.id = (SELECT max(id) FROM same WHERE lease_until > now()) RETURNING e.id),"
    " new AS (INSERT INTO memory_erasures (tenant_id, user_id, agent_id, session_id,"
    " lease_until, claim_token) SELECT %(t)s, %(u)s, %(a)s, %(s)s,"
    " now() + %(lease)s * interval '1 second', %(token)s"
    " WHERE NOT EXISTS (SELECT 1 FROM taken) RETURNING id)"
    " SELECT id FROM taken UNION ALL SELECT id FROM new"
)
_HELD = "id = %(id)s AND claim_token = %(token)s AND finished_at IS NULL"
_RENEW = (
    "UPDATE memory_erasures SET lease_until = greatest(lease_until,"
    " now() + %(lease)s * interval '1 second') WHERE " + _HELD + " RETURNING id"
)
_FINISH = "UPDATE memory_erasures SET finished_at = clock_timestamp() WHERE " + _HELD
_closing: set[asyncio.Task[None]] = set()  # finishes running shielded from cancellation


class Erasure:
    """One forget's hold on its erasure row: started before any delete, renewed between
    chunks, finished at the end, also when the forget fails or is cancelled.

    Only the holder (``token``) renews or finishes the row: a retried forget of the same
    scope that took it over finishes it instead; this one then goes on deleting (that
    is harmless) without touching the row.
    """

    def __init__(self, erasure_id: int, token: uuid.UUID, lease_s: float) -> None:
        self.id, self.token, self.lease_s = erasure_id, token, lease_s
        self.held = True  # False once finished, or once another forget took the row over
        self._renewed = time.monotonic()

    def _params(self) -> dict[str, Any]:
        return {"id": self.id, "token": self.token, "lease": self.lease_s}

    @classmethod
    async def start(
        cls,
        conn: AsyncConnection,
        tenant_id: str,
        user_id: str | None,
        agent_id: str | None = None,
        session_id: str | None = None,
        *,
        lease_s: float,
    ) -> Erasure:
        """Record a forget as running (committed before any delete: work racing it stops)."""
        token = uuid.uuid4()
        cur = await conn.execute(
            _START,
            {
                "t": tenant_id,
                "u": user_id,
                "a": agent_id or "",
                "s": session_id or "",
                "token": token,
                "lease": lease_s,
            },
        )
        return cls((await cur.fetchone())["id"], token, lease_s)

    async def heartbeat(self, conn: AsyncConnection) -> None:
        """Renew the lease once a third of it has passed (call between chunks)."""
        if not self.held or time.monotonic() - self._renewed < self.lease_s / 3:
            return
        cur = await conn.execute(_RENEW, self._params())
        self._renewed = time.monotonic()
        if await cur.fetchone() is None:
            self.held = False
            log.warning("erasure %d was taken over by a retried forget of its scope", self.id)

    async def finish(self, conn: AsyncConnection) -> None:
        """Stamp ``finished_at`` (if this forget still holds the row)."""
        if self.held:
            await conn.execute(_FINISH, self._params())
            self.held = False

    async def close(self, pool: AsyncConnectionPool) -> None:
        """Finish after a failure: on a fresh connection (the forget's may be broken) and
        shielded from cancellation (a client that hangs up must not leave the row
        running). If the database cannot be reached the lease runs out instead."""
        if not self.held:
            return
        task = asyncio.ensure_future(self._finish_on(pool))
        _closing.add(task)
        task.add_done_callback(_closing.discard)
        await asyncio.shield(task)

    async def _finish_on(self, pool: AsyncConnectionPool) -> None:
        try:
            async with pool.connection() as conn:
                await self.finish(conn)
        except psycopg.Error as exc:  # PoolTimeout is one too
            log.warning("finishing erasure %d failed (its lease runs out): %s", self.id, exc)


def voided_owner(since: str) -> str:
    """SQL: an erasure of the owner ``%(tenant_id)s``/``%(user_id)s`` (the whole user, one
    agent or session of theirs, or the tenant) voids work begun at ``since`` (SQL)."""
    return (
        "EXISTS (SELECT 1 FROM memory_erasures e WHERE e.tenant_id = %(tenant_id)s"
        " AND (e.user_id IS NULL OR e.user_id = %(user_id)s) AND " + VOIDS + since + ")"
    )


async def prune(conn: AsyncConnection, keep_s: float) -> int:
    """Drop erasure records that stopped voiding work ``keep_s`` ago (finished, or their
    lease ran out); work that old has lost its own lease long since."""
    cur = await conn.execute(
        "DELETE FROM memory_erasures"
        " WHERE coalesce(finished_at, lease_until) < now() - %(keep)s * interval '1 second'",
        {"keep": keep_s},
    )
    return cur.rowcount
