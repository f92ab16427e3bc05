"""Async connection pool with pgvector types registered on every connection.

Connections are in autocommit mode: a single statement is one round trip (no
implicit BEGIN and COMMIT around it); code that needs several statements to be
atomic says so with ``conn.transaction()``. A connection handed out after idling
in the pool is pinged first (after a server restart it would be dead); one used
moments ago is not, which saves a round trip on every busy-path acquisition (a
connection broken in between fails that one request with a 503 and is discarded).
"""

from __future__ import annotations

import time

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from serve_app.db import adapters
from serve_app.settings import Settings

_HANDED_OUT_AT = "_memserve_handed_out_at"


async def _configure(conn: AsyncConnection) -> None:
    await register_vector_async(conn)
    adapters.register(conn)  # datetimes go as UTC (any ISO offset fits)
    conn.row_factory = dict_row


def _checker(idle_s: float):
    """Ping a connection only if it was last handed out ``idle_s`` or more ago."""

    async def check(conn: AsyncConnection) -> None:
        now = time.monotonic()
        last = getattr(conn, _HANDED_OUT_AT, None)
        setattr(conn, _HANDED_OUT_AT, now)
        if last is None or now - last >= idle_s:
            await AsyncConnectionPool.check_connection(conn)

    return check


async def open_pool(
    dsn: str, settings: Settings, *, min_size: int | None = None
) -> AsyncConnectionPool:
    """Open a pool that fails fast (connect timeout, statement timeout) instead of hanging."""
    kwargs = {
        "connect_timeout": settings.db.connect_timeout_s,
        "options": f"-c statement_timeout={settings.db.statement_timeout_ms}",
        "application_name": "memserve",
        "autocommit": True,
    }
    pool = AsyncConnectionPool(
        dsn,
        min_size=settings.db.pool_min if min_size is None else min_size,
        max_size=settings.db.pool_max,
        kwargs=kwargs,
        configure=_configure,
        timeout=settings.db.pool_timeout_s,
        reconnect_timeout=60 * 60 * 24 * 365,  # never give up reconnecting: outages end
        open=False,
        check=_checker(settings.db.pool_check_idle_s),
    )
    await pool.open(wait=False)
    return pool
