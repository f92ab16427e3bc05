"""Erasure records, and the guard that keeps extraction in flight from undoing a forget.

A forget writes a ``memory_erasures`` row when it starts and stamps ``finished_at``
when it is done. Extraction work is marked when it reads its turns
(``TurnStore.claim_pending``/``uncompressed`` call :func:`begin_work` with the
database's clock); every memory or fact write made afterwards in the same asyncio
task carries :func:`guard` in its own statement: it writes nothing when a forget of
that owner (user, user+agent, user+session or the whole tenant) is running or
finished after the work began. Writes outside extraction work (API calls) are not
guarded: data sent after a forget is new data.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql


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


def clause(agent_col: sql.Composable | None = None) -> sql.Composable:
    """``NOT EXISTS (an erasure that voids the current work)``, bound by :func:`params`.

    ``agent_col`` is the SQL of the written row's agent id (an agent forget voids only
    rows of that agent). The statement must bind ``%(tenant_id)s`` to the work's tenant.
    """
    agent = sql.SQL("")
    if agent_col is not None:
        agent = sql.SQL(" OR e.agent_id = coalesce({}, '')").format(agent_col)
    return sql.SQL(
        "NOT EXISTS (SELECT 1 FROM memory_erasures e WHERE e.tenant_id = %(tenant_id)s"
        " AND (e.user_id IS NULL OR e.user_id = %(erasure_user)s)"
        " AND (e.session_id = '' OR e.session_id = %(erasure_session)s)"
        " AND (e.agent_id = ''{agent})"
        " AND (e.finished_at IS NULL OR e.finished_at > %(erasure_since)s))"
    ).format(agent=agent)


def params() -> dict[str, Any]:
    """Parameters of :func:`clause` for the current work; ``{}`` outside extraction work."""
    work = _work.get()
    if work is None:
        return {}
    return {
        "erasure_user": work.user_id,
        "erasure_session": work.session_id,
        "erasure_since": work.since,
    }


async def start(
    conn: AsyncConnection,
    tenant_id: str,
    user_id: str | None,
    agent_id: str | None = None,
    session_id: str | None = None,
) -> int:
    """Record a forget as running (committed before any delete: work racing it stops)."""
    cur = await conn.execute(
        "INSERT INTO memory_erasures (tenant_id, user_id, agent_id, session_id)"
        " VALUES (%(t)s, %(u)s, %(a)s, %(s)s) RETURNING id",
        {"t": tenant_id, "u": user_id, "a": agent_id or "", "s": session_id or ""},
    )
    return (await cur.fetchone())["id"]


async def finish(conn: AsyncConnection, erasure_id: int) -> None:
    await conn.execute(
        "UPDATE memory_erasures SET finished_at = clock_timestamp() WHERE id = %(id)s",
        {"id": erasure_id},
    )


async def prune(conn: AsyncConnection, keep_s: float) -> int:
    """Drop finished erasure records older than ``keep_s`` (work that old has lost its lease)."""
    cur = await conn.execute(
        "DELETE FROM memory_erasures WHERE finished_at < now() - %(keep)s * interval '1 second'",
        {"keep": keep_s},
    )
    return cur.rowcount
