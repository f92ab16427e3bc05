"""``memory_events``: the outbox every change writes in its own transaction.

Memory, fact and extraction events are written by triggers (migration 0022) on
``memory_history``, ``facts`` and ``session_turns``, so no producer can change memory
without its event and a rolled-back change leaves none. The few events that are not a
row change (``import.completed``, ``forget.completed``) are written here, by their
producer, in its transaction.

The feed orders events by ``(txid, id)`` and shows only those of transactions older
than every transaction still running (``txid < pg_snapshot_xmin``): an event that
commits later always sorts after the page a reader already has, so resuming from a
cursor never skips one (a long-running transaction holds the feed back meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import column_list

# Every type an event may have (the feed's ``types`` filter names these).
EVENT_TYPES: tuple[str, ...] = (
    "memory.added",
    "memory.updated",
    "memory.invalidated",
    "memory.deleted",
    "memory.archived",
    "fact.set",
    "fact.deleted",
    "extraction.completed",
    "extraction.failed",
    "extraction.deferred",
    "import.completed",
    "forget.completed",
    "document.ingested",  # a document posted (a new version); data: id, version
    "document.deleted",
)
EVENT_COLUMNS: tuple[str, ...] = (
    "id",
    "txid",
    "event_id",
    "type",
    "user_id",
    "agent_id",
    "session_id",
    "scope",
    "memory_id",
    "version",
    "decision",
    "reason",
    "actor",
    "data",
    "occurred_at",
)
QUIET = "SET LOCAL memserve.events = 'off'"  # this transaction's changes emit no event
LOUD = "SET LOCAL memserve.events = 'on'"


@dataclass(frozen=True)
class Cursor:
    """A position in a tenant's feed: the last event returned (txid, id)."""

    txid: int = 0
    id: int = 0

    def token(self) -> str:
        return f"{self.txid}-{self.id}"

    @classmethod
    def parse(cls, token: str | None) -> Cursor:
        """``txid-id`` as :meth:`token` writes it; ValueError on anything else."""
        if not token:
            return cls()
        txid, sep, ident = token.partition("-")
        digits = txid.isascii() and txid.isdigit() and ident.isascii() and ident.isdigit()
        if not sep or not digits or len(token) > 41:
            raise ValueError("cursor must be the next_cursor of an earlier page")
        # txid is an xid8 (unsigned 64 bits), id a bigint: larger numbers are no cursor
        # this feed wrote, and PostgreSQL would refuse the cast (a 500, not a 400).
        if int(txid) >= 2**64 or int(ident) >= 2**63:
            raise ValueError("cursor must be the next_cursor of an earlier page")
        return cls(int(txid), int(ident))


async def emit(
    conn: AsyncConnection,
    tenant_id: str,
    type_: str,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    session_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """One event that is not a row change, in ``conn``'s transaction (no content)."""
    await conn.execute(
        "INSERT INTO memory_events (tenant_id, type, user_id, agent_id, session_id, data)"
        " VALUES (%(t)s, %(type)s, %(u)s, %(a)s, %(s)s, %(data)s)",
        {
            "t": tenant_id,
            "type": type_,
            "u": user_id,
            "a": agent_id,
            "s": session_id,
            "data": Jsonb(data or {}),
        },
    )


class EventStore:
    """Reads of the feed, the forget of an owner's events and retention pruning."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def page(
        self,
        tenant_id: str,
        after: Cursor,
        *,
        limit: int,
        user_id: str | None = None,
        types: Sequence[str] = (),
        include_content: bool = False,
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` settled events after ``after``, oldest first; ``newest``: the
        ones before ``after`` (an empty cursor: the newest), newest first (a console's
        "recent events", paged backwards)."""
        cols = list(EVENT_COLUMNS) + (["content"] if include_content else [])
        if not newest:
            bound = sql.SQL("(txid, id) > (%(txid)s::text::xid8, %(id)s)")
        elif after == Cursor():
            bound = sql.SQL("true")
        else:
            bound = sql.SQL("(txid, id) < (%(txid)s::text::xid8, %(id)s)")
        where = [
            sql.SQL(
                "tenant_id = %(t)s AND {} AND txid < pg_snapshot_xmin(pg_current_snapshot())"
            ).format(bound)
        ]
        if user_id is not None:
            where.append(sql.SQL("user_id = %(u)s"))
        if types:
            where.append(sql.SQL("type = ANY(%(types)s)"))
        query = sql.SQL(
            "SELECT {cols} FROM memory_events WHERE {where} ORDER BY {order} LIMIT %(limit)s"
        ).format(
            cols=column_list(cols),
            where=sql.SQL(" AND ").join(where),
            order=sql.SQL("txid DESC, id DESC" if newest else "txid, id"),
        )
        params = {
            "t": tenant_id,
            "txid": after.txid,
            "id": after.id,
            "u": user_id,
            "types": list(types),
            "limit": limit,
        }
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(query, params)).fetchall()
        for row in rows:
            row["txid"] = int(row["txid"])
        return rows

    async def forget(
        self,
        conn: AsyncConnection,
        where: sql.Composable,
        params: dict[str, Any],
        *,
        batch: int,
    ) -> int:
        """Delete the events ``where`` selects (a forget's scope), ``batch`` at a time."""
        query = sql.SQL(
            "WITH gone AS (DELETE FROM memory_events WHERE id IN (SELECT id FROM memory_events"
            " WHERE {} LIMIT %(batch)s) RETURNING 1) SELECT count(*) AS n FROM gone"
        ).format(where)
        total = 0
        while True:
            n = (await (await conn.execute(query, {**params, "batch": batch})).fetchone())["n"]
            total += n
            if n < batch:
                return total

    async def prune(
        self, conn: AsyncConnection, keep_s: float, *, batch: int, max_batches: int
    ) -> int:
        """Delete events older than ``keep_s`` (at most ``batch * max_batches`` a round)."""
        query = (
            "WITH gone AS (DELETE FROM memory_events WHERE id IN (SELECT id FROM memory_events"
            " WHERE occurred_at < now() - make_interval(secs => %(keep)s) LIMIT %(batch)s)"
            " RETURNING 1) SELECT count(*) AS n FROM gone"
        )
        total = 0
        for _ in range(max_batches):
            n = (await (await conn.execute(query, {"keep": keep_s, "batch": batch})).fetchone())[
                "n"
            ]
            total += n
            if n < batch:
                break
        return total
