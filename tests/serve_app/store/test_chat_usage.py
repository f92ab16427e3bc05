"""The batched chat-usage meter against real Postgres: sums in memory, one upsert per flush."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve_app.db.pool import open_pool
from serve_app.services.chat_usage import ChatUsageMeter
from serve_app.settings import Settings
from serve_app.store.chat_usage import ChatUsageStore, Usage
from serve_app.store.keys import KeyStore


@pytest.fixture
async def keys(pool) -> dict[str, str]:
    """Key ids: a, b of tenant t1, c of tenant t2 (chat_usage rows reference api_keys)."""
    store = KeyStore(pool)
    made = {}
    for name, tenant in (("a", "t1"), ("b", "t1"), ("c", "t2")):
        _, row = await store.create(tenant, "service", name=name)
        made[name] = str(row["id"])
    return made


async def table(pool) -> dict[str, tuple[int, int, int, int]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT key_id::text AS k, requests, refused, prompt_tokens, completion_tokens"
            " FROM chat_usage"
        )
        return {r["k"]: tuple(list(r.values())[1:]) for r in await cur.fetchall()}


def totals(rows: list[dict]) -> dict[str, tuple[int, int, int, int]]:
    kinds = ("requests", "refused", "prompt_tokens", "completion_tokens")
    return {r["key_id"]: tuple(r[k] for k in kinds) for r in rows}


def spend(meter: ChatUsageMeter, keys: dict[str, str], rounds: int) -> None:
    """``rounds`` answered calls (10 + 2 tokens) per key and one refusal per round for a."""
    for _ in range(rounds):
        for name, tenant in (("a", "t1"), ("b", "t1"), ("c", "t2")):
            meter.count(keys[name], tenant, Usage(1, 0, 10, 2))
        meter.count(keys["a"], "t1", Usage(refused=1))


async def test_many_calls_are_one_statement_and_pending_is_reported(pool, keys):
    meter = ChatUsageMeter(ChatUsageStore(pool), flush_s=0)  # flushed only when asked
    spend(meter, keys, 100)
    assert meter.pending == 3 and await table(pool) == {}
    want = {keys["a"]: (100, 100, 1000, 200), keys["b"]: (100, 0, 1000, 200)}
    assert totals(await meter.report("t1")) == want  # not written yet, already shown
    assert totals(await meter.report("t1", keys["b"])) == {keys["b"]: want[keys["b"]]}

    assert await meter.flush() == 3
    assert meter.flushes == 1 and meter.pending == 0
    assert await table(pool) == {**want, keys["c"]: (100, 0, 1000, 200)}
    async with pool.connection() as conn:  # every row came from one transaction
        cur = await conn.execute("SELECT count(DISTINCT xmin::text) AS n FROM chat_usage")
        assert (await cur.fetchone())["n"] == 1
    assert await meter.flush() == 0 and meter.flushes == 1  # nothing pending: no statement

    spend(meter, keys, 5)  # written rows plus pending sums, added per (key, day)
    rows = await meter.report("t1")
    assert totals(rows) == {keys["a"]: (105, 105, 1050, 210), keys["b"]: (105, 0, 1050, 210)}
    assert len({r["day"] for r in rows}) == 1 and len(rows) == 2
    await meter.flush()
    assert (await table(pool))[keys["a"]] == (105, 105, 1050, 210)
    await meter.aclose()


async def test_report_during_flushes_counts_each_call_once(pool, keys):
    meter = ChatUsageMeter(ChatUsageStore(pool), flush_s=0)
    for expected in range(1, 21):
        meter.count(keys["a"], "t1", Usage(requests=1))
        flush = asyncio.ensure_future(meter.flush())
        if expected % 2:
            await asyncio.sleep(0)  # the flush takes its batch out and starts writing
        rows = await meter.report("t1", keys["a"])
        await flush
        assert rows[0]["requests"] == expected
    await meter.aclose()


async def test_shutdown_writes_what_is_pending(pool, keys):
    meter = ChatUsageMeter(ChatUsageStore(pool), flush_s=3600)
    spend(meter, keys, 7)
    await meter.aclose()
    assert await table(pool) == {
        keys["a"]: (7, 7, 70, 14),
        keys["b"]: (7, 0, 70, 14),
        keys["c"]: (7, 0, 70, 14),
    }


async def test_max_pending_flushes_early(pool, keys):
    meter = ChatUsageMeter(ChatUsageStore(pool), flush_s=3600, max_pending=2)
    meter.count(keys["a"], "t1", Usage(requests=1))
    meter.count(keys["b"], "t1", Usage(requests=1))
    assert meter._early is None
    meter.count(keys["c"], "t2", Usage(requests=1))  # a third key: over the bound
    assert meter._early is not None
    await meter._early
    assert meter.flushes == 1 and meter.pending == 0
    assert sum(r[0] for r in (await table(pool)).values()) == 3
    await meter.aclose()


async def test_a_failed_write_keeps_the_sums_for_the_next_flush(fresh_db, pool, keys):
    broken = await open_pool(fresh_db, Settings(), min_size=1)
    await broken.close()
    meter = ChatUsageMeter(ChatUsageStore(broken), flush_s=0)
    spend(meter, keys, 3)
    with pytest.raises(Exception):  # noqa: B017 - whatever the closed pool raises
        await meter.flush()
    assert meter.pending == 3 and meter.flushes == 0
    meter.count(keys["a"], "t1", Usage(requests=1))
    meter.store = ChatUsageStore(pool)
    assert totals(await meter.report("t1", keys["a"])) == {keys["a"]: (4, 3, 30, 6)}
    await meter.aclose()
    assert (await table(pool))[keys["a"]] == (4, 3, 30, 6)


async def test_the_periodic_flush_writes_without_being_asked(pool, keys):
    meter = ChatUsageMeter(ChatUsageStore(pool), flush_s=0.05)
    meter.count(keys["a"], "t1", Usage(1, 0, 5, 1))
    deadline = time.monotonic() + 5
    while meter.flushes == 0:
        assert time.monotonic() < deadline, "no periodic flush"
        await asyncio.sleep(0.01)
    assert await table(pool) == {keys["a"]: (1, 0, 5, 1)}
    await meter.aclose()


async def test_without_a_store_nothing_is_kept(pool, keys):
    meter = ChatUsageMeter(None)
    spend(meter, keys, 2)
    assert meter.pending == 0 and await meter.report("t1") == []
    assert await meter.flush() == 0
    await meter.aclose()
