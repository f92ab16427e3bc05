"""GuardedWriter on a real PostgreSQL: a running forget refuses API writes (and only while
it runs), fact quotas, validation of every producer's records, the quota race."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from serve_app.store import NewMemory, Owner, erasure, quota
from serve_app.store.erasure import Erasure
from serve_app.store.guarded import ForgetInProgress, GuardedWriter, ValidationError
from serve_app.store.quota import Quota, QuotaExceeded
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM, vecs

A = Owner("t1", "alice")
B = Owner("t1", "bob")


@pytest.fixture
async def writer(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return GuardedWriter(pool, "test")


async def count(pool, table: str) -> int:
    async with pool.connection() as conn:
        return (await (await conn.execute(f"SELECT count(*) AS n FROM {table}")).fetchone())["n"]


async def test_api_writes_are_refused_while_a_forget_runs_and_succeed_after(writer, pool):
    [kept] = await writer.add(A, [NewMemory("before the forget")], vecs(1))
    async with pool.connection() as conn:
        running = await Erasure.start(conn, "t1", "alice", lease_s=60)
    with pytest.raises(ForgetInProgress, match="forget of user alice is running"):
        await writer.add(A, [NewMemory("during")], vecs(1))
    with pytest.raises(ForgetInProgress):
        await writer.update(A, kept["id"], {"importance": 0.9}, None)
    with pytest.raises(ForgetInProgress):
        await writer.upsert_fact(A, "diet", "kind", "vegan", 0.9)
    assert len(await writer.add(B, [NewMemory("bob is not being forgotten")], vecs(1))) == 1
    assert await count(pool, "memory_items") == 2 and await count(pool, "facts") == 0
    async with pool.connection() as conn:
        await running.finish(conn)
    assert len(await writer.add(A, [NewMemory("after: new data")], vecs(1))) == 1
    assert await writer.upsert_fact(A, "diet", "kind", "vegan", 0.9) == "added"


async def test_a_session_forget_refuses_only_that_sessions_writes(writer, pool):
    async with pool.connection() as conn:
        await Erasure.start(conn, "t1", "alice", session_id="s1", lease_s=60)
    with pytest.raises(ForgetInProgress):
        await writer.add(A, [NewMemory("x", scope="session", session_id="s1")], vecs(1))
    rows = await writer.add(A, [NewMemory("y", scope="session", session_id="s2")], vecs(1))
    assert len(rows) == 1


async def test_work_begun_before_a_forget_is_voided_silently(writer, pool):
    async with pool.connection() as conn:
        since = (await (await conn.execute("SELECT now() AS t")).fetchone())["t"]
        done = await Erasure.start(conn, "t1", "alice", lease_s=60)
        await done.finish(conn)
    erasure.begin_work("t1", "alice", "", since)
    try:
        assert await writer.add(A, [NewMemory("built from deleted data")], vecs(1)) == []
        assert await writer.upsert_fact(A, "diet", "kind", "vegan", 0.9) == "erased"
    finally:
        erasure.end_work()
    assert await count(pool, "memory_items") == 0 and await count(pool, "facts") == 0


async def test_fact_quota_per_user_and_tenant(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    writer = GuardedWriter(pool, "test", fact_quota=Quota(per_user=2, per_tenant=3))
    assert await writer.upsert_fact(A, "pet", "name", "Rex", 0.9) == "added"
    assert await writer.upsert_fact(A, "home", "city", "Oslo", 0.9) == "added"
    with pytest.raises(QuotaExceeded, match="user fact quota") as exc:
        await writer.upsert_fact(A, "diet", "kind", "vegan", 0.9)
    assert (exc.value.kind, exc.value.what, exc.value.used) == ("user", "fact", 2)
    # a new value of a key it has is not a new fact
    assert await writer.upsert_fact(A, "home", "city", "Bergen", 1.0, source="user") == "replaced"
    assert await writer.upsert_fact(B, "pet", "name", "Tom", 0.9) == "added"
    with pytest.raises(QuotaExceeded, match="tenant fact quota"):
        await writer.upsert_fact(B, "home", "city", "Rome", 0.9)
    assert await count(pool, "facts") == 4  # 3 active + Oslo, replaced


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cat", "k", "a\x00b", 0.9), "value must not contain NUL"),
        (("cat", "k", "v", 1.5), "confidence must be a number from 0 to 1"),
        (("cat", "k", "v", math.nan), "confidence"),
        (("", "k", "v", 0.9), "category must not be empty"),
        (("c" * 33, "k", "v", 0.9), "category is longer than 32"),
    ],
)
async def test_bad_facts_are_validation_errors_that_write_nothing(writer, pool, args, message):
    with pytest.raises(ValidationError, match=message):
        await writer.upsert_fact(A, *args)
    assert await count(pool, "facts") == 0


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (NewMemory("x", importance=2.0), "importance"),
        (NewMemory("x", confidence=math.inf), "confidence"),
        (NewMemory("x", type="gossip"), "type must be one of"),
        (NewMemory("x", tags=["ok", "b\x00d"]), "each tag"),
        (NewMemory("x", metadata={"k": "\x00"}), "metadata must not contain NUL"),
        (NewMemory("x", expires_at=datetime(2030, 1, 1)), "expires_at must be a datetime with"),
        (NewMemory("x" * 8001), "content is longer than 8000"),
        (NewMemory("   "), "content must not be empty"),
    ],
)
async def test_bad_memories_are_validation_errors_that_write_nothing(writer, pool, item, message):
    with pytest.raises(ValidationError, match=message):
        await writer.add(A, [item], vecs(1))
    assert await count(pool, "memory_items") == 0


async def test_a_bad_update_is_refused(writer):
    [row] = await writer.add(A, [NewMemory("ok")], vecs(1))
    with pytest.raises(ValidationError, match="content must not contain NUL"):
        await writer.update(A, row["id"], {"content": "a\x00"}, None)
    assert (await writer.memories.get(A, row["id"]))["content"] == "ok"


async def test_a_quota_race_ends_in_a_clear_refusal_not_an_empty_result(
    fresh_db, pool, monkeypatch
):
    """The gate refused, but by the time the writer asks why, the counts say there is
    room (another writer deleted meanwhile): the writer tries again, then says 403 — it
    never hands an empty list to a caller that indexes it."""
    ensure_table(fresh_db, "test", DIM)
    writer = GuardedWriter(pool, "test", memory_quota=Quota(per_user=1))
    await writer.add(A, [NewMemory("one")], vecs(1))
    checks = []

    async def room_again(*args, **kwargs):
        checks.append(datetime.now(UTC))
        return None

    monkeypatch.setattr(quota, "exceeded", room_again)
    with pytest.raises(QuotaExceeded, match="user memory quota \\(1\\)"):
        await writer.add(A, [NewMemory("two")], vecs(1))
    assert len(checks) == 2  # refused, asked, retried, refused again
    assert await count(pool, "memory_items") == 1


async def test_a_quota_race_that_resolves_writes_on_the_retry(fresh_db, pool, monkeypatch):
    ensure_table(fresh_db, "test", DIM)
    writer = GuardedWriter(pool, "test", memory_quota=Quota(per_user=1))
    [one] = await writer.add(A, [NewMemory("one")], vecs(1))

    async def freed_meanwhile(*args, **kwargs):
        await writer.delete(A, one["id"])  # the room appears between refusal and retry
        return None

    monkeypatch.setattr(quota, "exceeded", freed_meanwhile)
    [two] = await writer.add(A, [NewMemory("two")], vecs(1))
    assert two["content"] == "two"
