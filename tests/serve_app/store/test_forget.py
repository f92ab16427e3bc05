"""Forget, expiry purge, erasure guard and quotas against a real PostgreSQL (no Ray)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from serve_app.db.pool import open_pool
from serve_app.services.purge import Purger
from serve_app.settings import DatabaseSettings, LifecycleSettings, Settings
from serve_app.store import NewMemory, Owner, erasure
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import GuardedWriter
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.quota import Quota, QuotaExceeded
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM, vecs

VERSION = "SELECT version FROM memory_owner_versions WHERE owner = 'alice'"
A = Owner("t1", "alice")
B = Owner("t1", "bob")


@pytest.fixture
async def db(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return pool


async def add(store: GuardedWriter, owner: Owner, *contents: str, **kw) -> list[dict]:
    items = [NewMemory(content=c, **kw) for c in contents]
    return await store.add(owner, items, vecs(len(items), seed=len(contents)))


async def scalar(pool, query: str, **params) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        return next(iter((await cur.fetchone()).values()))


async def test_forget_user_removes_every_kind_and_counts_it(db):
    store, forget = GuardedWriter(db, "test"), ForgetStore(db, "test", batch=3)
    rows = await add(store, A, *(f"alice fact {i}" for i in range(7)))
    await store.update(A, rows[0]["id"], {"content": "changed"}, None)
    await store.delete(A, rows[1]["id"])  # history left behind by an earlier delete
    await add(store, B, "bob keeps this")
    facts, turns = GuardedWriter(db, "test"), TurnStore(db)
    await facts.upsert_fact(A, "diet", "kind", "vegan", 0.9)
    await facts.upsert_fact(A, "diet", "kind", "vegetarian", 0.95)  # two versions
    await facts.upsert_fact(B, "diet", "kind", "omnivore", 0.9)
    key = SessionKey("t1", "alice", "s1")
    await turns.append(key, [("user", "hi"), ("assistant", "hello")], agent_id=None, ttl_hours=1)
    await turns.end(key)

    before = await scalar(db, VERSION)
    counts = await forget.forget(Scope("t1", "alice"))

    assert counts["memories"] == 6 and counts["vectors"] == 6
    assert counts["facts"] == 2 and counts["turns"] == 2 and counts["sessions"] == 1
    assert counts["history"] == 7 + 1 + 1  # 7 ADD, 1 UPDATE, the earlier DELETE
    for table in ("memory_items", "memory_history", "facts", "session_turns", "session_state"):
        assert await scalar(db, f"SELECT count(*) FROM {table} WHERE user_id = 'alice'") == 0
    assert await scalar(db, "SELECT count(*) FROM memory_vectors_test") == 1  # bob's
    assert await scalar(db, "SELECT count(*) FROM facts WHERE user_id = 'bob'") == 1
    assert await scalar(db, "SELECT finished_at IS NOT NULL FROM memory_erasures") is True
    # the owner's version moved on: every cache entry loaded before is stale
    assert await scalar(db, VERSION) > before


async def test_forget_session_and_agent_narrow_the_scope(db):
    store, forget = GuardedWriter(db, "test"), ForgetStore(db, "test")
    await add(store, A, "in s1", session_id="s1", scope="session")
    await add(store, A, "of agent a1", agent_id="a1")
    await add(store, A, "plain")
    await GuardedWriter(db, "test").upsert_fact(A, "city", "home", "Oslo", 0.9, session_id="s1")
    await GuardedWriter(db, "test").upsert_fact(A, "pet", "name", "Rex", 0.9, session_id="s2")
    s1 = await forget.forget(Scope("t1", "alice", session_id="s1"))
    assert (s1["memories"], s1["facts"]) == (1, 1)
    a1 = await forget.forget(Scope("t1", "alice", agent_id="a1"))
    assert (a1["memories"], a1["facts"]) == (1, 0)
    rows, _ = await store.memories.list(A, limit=10)
    assert [r["content"] for r in rows] == ["plain"]


async def test_erase_tenant_leaves_other_tenants(db):
    store, forget = GuardedWriter(db, "test"), ForgetStore(db, "test")
    await add(store, A, "a")
    await add(store, Owner("t1", None), "shared", scope="org")
    await add(store, Owner("t2", "alice"), "other tenant")
    counts = await forget.forget(Scope("t1", None))
    assert counts["memories"] == 2
    assert await scalar(db, "SELECT count(*) FROM memory_items") == 1
    assert (
        await scalar(db, "SELECT n FROM memory_counts WHERE tenant_id = 't1' AND owner = ''") == 0
    )


async def test_extraction_in_flight_writes_nothing_after_a_forget(db):
    store, facts, turns = GuardedWriter(db, "test"), GuardedWriter(db, "test"), TurnStore(db)
    key = SessionKey("t1", "alice", "s1")
    await turns.append(key, [("user", "I am vegan")], agent_id=None, ttl_hours=1)
    rows = await turns.claim_pending(key, 10, 60)  # extraction work begins
    assert rows and erasure.current() is not None
    await ForgetStore(db, "test").forget(Scope("t1", "alice"))  # forget while the LLM thinks
    assert await add(store, A, "extracted: vegan") == []
    assert await facts.upsert_fact(A, "diet", "kind", "vegan", 0.9) == "erased"
    assert await scalar(db, "SELECT count(*) FROM memory_items") == 0
    assert await scalar(db, "SELECT count(*) FROM facts") == 0
    # work that begins after the forget writes again, and so do API writes after it
    await turns.append(key, [("user", "I like tea")], agent_id=None, ttl_hours=1)
    await turns.claim_pending(key, 10, 60)
    assert len(await add(store, A, "likes tea")) == 1
    erasure.end_work()
    assert len(await add(store, A, "api write")) == 1


async def test_expired_memories_are_invisible_and_purged_in_batches(db):
    store, forget = GuardedWriter(db, "test"), ForgetStore(db, "test")
    past = datetime.now(UTC) - timedelta(seconds=1)
    gone = await add(store, A, *(f"old {i}" for i in range(5)), expires_at=past)
    kept = await add(store, A, "kept", expires_at=datetime.now(UTC) + timedelta(hours=1))
    assert await store.memories.get(A, gone[0]["id"]) is None
    assert await store.update(A, gone[0]["id"], {"importance": 0.9}, None) is None
    index = MemoryIndex(db, "test")
    assert await index.by_hash(A, "old 0") is None  # dedup never picks an expired row
    near = await index.nearest(A, vecs(5, seed=5)[0], k=10)
    assert {m.id for m in near} == {kept[0]["id"]}
    assert await forget.purge_expired(batch=2, max_batches=2) == 4  # bounded
    assert await forget.purge_expired(batch=2, max_batches=2) == 1
    assert await scalar(db, "SELECT count(*) FROM memory_items") == 1
    assert (
        await scalar(
            db, "SELECT count(*) FROM memory_history WHERE memory_id = %(i)s", i=gone[0]["id"]
        )
        == 0
    )


async def test_quota_per_user_and_tenant_writes_nothing_over_it(db):
    store = GuardedWriter(db, "test", memory_quota=Quota(per_user=3, per_tenant=5))
    await add(store, A, "1", "2")
    with pytest.raises(QuotaExceeded) as exc:
        await add(store, A, "3", "4")
    assert exc.value.kind == "user" and exc.value.used == 2
    await add(store, A, "3")
    await add(store, B, "b1", "b2")
    with pytest.raises(QuotaExceeded) as exc:
        await add(store, B, "b3")
    assert exc.value.kind == "tenant"
    assert await scalar(db, "SELECT count(*) FROM memory_items") == 5
    await ForgetStore(db, "test").forget(Scope("t1", "bob"))
    assert len(await add(store, B, "b3")) == 1  # counts follow deletes


async def test_explicit_fact_wins_over_extraction(db):
    facts = GuardedWriter(db, "test")
    await facts.upsert_fact(A, "home", "city", "Oslo", 0.99)
    assert await facts.upsert_fact(A, "home", "city", "Bergen", 0.2, source="user") == "replaced"
    assert await facts.upsert_fact(A, "home", "city", "Paris", 1.0) == "ignored"
    assert (await facts.facts.get(A, "home", "city"))["value"] == "Bergen"
    assert len(await facts.facts.list(A, include_inactive=True)) == 2  # the history stays
    assert await facts.delete_facts(A, "home", "city") == 2
    assert await facts.facts.list(A, include_inactive=True) == []


def test_settings_groups():
    s = Settings()
    assert s.lifecycle.forget_batch > 0 and s.quota.max_memories_per_user == 0


async def test_purger_round_works_on_the_connection_holding_its_lock(fresh_db):
    ensure_table(fresh_db, "test", DIM)
    settings = Settings(db=DatabaseSettings(pool_max=1, pool_timeout_s=2.0))
    one = await open_pool(fresh_db, settings, min_size=1)  # a second slot never comes
    try:
        store = GuardedWriter(one, "test")
        await add(store, A, "old 1", "old 2", expires_at=datetime.now(UTC) - timedelta(seconds=1))
        purger = Purger(one, ForgetStore(one, "test"), LifecycleSettings(purge_batch=1))
        assert await purger.run_once() == 2
        assert await scalar(one, "SELECT count(*) FROM memory_items") == 0
    finally:
        await one.close()


class ParkedForgets(ForgetStore):
    """Forgets that stop before their memory chunks until the test lets them go."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.parked, self.go = 0, asyncio.Event()

    async def _memories(self, conn, held, scope, counts) -> None:
        self.parked += 1
        await self.go.wait()
        await super()._memories(conn, held, scope, counts)


async def test_concurrent_forgets_leave_the_pool_to_other_work(fresh_db):
    """Each forget holds a pooled connection to its end: as many large forgets as the pool
    has slots starved every other request of the replica. At most ``forget_concurrency``
    (2) now run at once; the others wait without a connection."""
    ensure_table(fresh_db, "test", DIM)
    pool = await open_pool(fresh_db, Settings(db=DatabaseSettings(pool_max=3)), min_size=3)
    forgets, tasks = ParkedForgets(pool, "test"), []
    try:
        users = [Owner("t1", f"u{i}") for i in range(6)]
        for owner in users:
            await add(GuardedWriter(pool, "test"), owner, f"{owner.user_id} memory")
        tasks = [asyncio.create_task(forgets.forget(Scope("t1", o.user_id))) for o in users]
        for _ in range(500):
            if forgets.parked >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time for any other forget that could start to park
        async with pool.connection(timeout=1.0) as conn:  # other work still gets one
            assert (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"] == 1
        assert forgets.parked == 2
        forgets.go.set()
        counts = await asyncio.gather(*tasks)
        assert [c["memories"] for c in counts] == [1] * 6
        assert await scalar(pool, "SELECT count(*) FROM memory_items") == 0
    finally:
        forgets.go.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()
