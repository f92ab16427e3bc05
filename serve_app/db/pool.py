"""Async connection pool with pgvector types registered on every connection."""

from __future__ import annotations

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from serve_app.settings import Settings


async def _configure(conn: AsyncConnection) -> None:
    await register_vector_async(conn)
    conn.row_factory = dict_row


async def open_pool(
    dsn: str, settings: Settings, *, min_size: int | None = None
) -> AsyncConnectionPool:
    """Open a pool that fails fast (connect timeout, statement timeout) instead of hanging."""
    kwargs = {
        "connect_timeout": settings.db_connect_timeout_s,
        "options": f"-c statement_timeout={settings.db_statement_timeout_ms}",
        "application_name": "memserve",
    }
    pool = AsyncConnectionPool(
        dsn,
        min_size=settings.db_pool_min if min_size is None else min_size,
        max_size=settings.db_pool_max,
        kwargs=kwargs,
        configure=_configure,
        timeout=settings.db_pool_timeout_s,
        reconnect_timeout=60 * 60 * 24 * 365,  # never give up reconnecting: outages end
        open=False,
        check=AsyncConnectionPool.check_connection,
    )
    await pool.open(wait=False)
    return pool
