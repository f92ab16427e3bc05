"""The pool: autocommit connections, pinged only after idling, healing after a restart."""

from __future__ import annotations

import asyncio

import pytest
from psycopg_pool import AsyncConnectionPool

from serve_app.db.pool import open_pool
from serve_app.settings import Settings


async def test_autocommit_and_ping_only_after_idle(fresh_db, monkeypatch):
    pings: list[int] = []
    real = AsyncConnectionPool.check_connection

    async def counting(conn):
        pings.append(1)
        await real(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(counting))
    pool = await open_pool(fresh_db, Settings().with_(db={"pool_check_idle_s": 0.2}), min_size=1)
    try:
        await pool.wait(10)
        for _ in range(5):  # busy: one ping for the first hand-out only
            async with pool.connection() as conn:
                assert conn.autocommit  # one statement = one round trip, no BEGIN/COMMIT
                await conn.execute("SELECT 1")
        assert len(pings) == 1
        await asyncio.sleep(0.3)
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
        assert len(pings) == 2
    finally:
        await pool.close()


async def test_explicit_transactions_stay_atomic(fresh_db):
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    try:
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE t_atomic (x int)")
        with pytest.raises(RuntimeError):
            async with pool.connection() as conn, conn.transaction():
                await conn.execute("INSERT INTO t_atomic VALUES (1)")
                raise RuntimeError("boom")
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM t_atomic")
            assert (await cur.fetchone())["n"] == 0
    finally:
        await pool.close()


async def test_datetimes_with_any_iso_offset_reach_postgres_as_the_same_instant(fresh_db):
    """PostgreSQL's text input takes offsets up to ±15:59; ISO 8601 (and pydantic) up to
    ±23:59. Schemathesis found ``expires_at: ...-16:58`` in a batch add as a 500."""
    from datetime import UTC, datetime, timedelta, timezone

    far = timezone(-timedelta(hours=16, minutes=58))
    ahead = timezone(timedelta(hours=18, minutes=31))
    values = [datetime(8054, 12, 21, 20, 45, 18, tzinfo=far), datetime(548, 3, 10, tzinfo=ahead)]
    edge = datetime(1, 1, 1, tzinfo=ahead)  # its UTC form is before year 1: clamped
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    try:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT %s::timestamptz[] AS a, %s::timestamptz AS e", (values, edge)
            )
            row = await cur.fetchone()
        assert row["a"] == values  # the same instants
        assert row["e"] == datetime.min.replace(tzinfo=UTC)
    finally:
        await pool.close()
