"""Model change against the real database: registry, resumable fill, repair, switch, drop."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from serve_app.db.pool import open_pool
from serve_app.metrics import ReembedMetrics
from serve_app.reembed.worker import Reembedder
from serve_app.settings import ReembedSettings, Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.model_registry import (
    REEMBED_LOCK,
    DropRefused,
    Wanted,
    drop_retired,
    models,
    reconcile,
)
from serve_app.store.vectors import ensure_table

A = Wanted("model_a", "ref-a", "model-a", 384)
B = Wanted("model_b", "ref-b", "model-b", 512)
OWNER = Owner("t1", "alice")
TEXTS = [
    "I am allergic to peanuts",
    "My sister lives in Lyon",
    "I play the cello on weekends",
    "My passport expires in 2031",
    "I prefer window seats on flights",
]


def no_legacy(_slug: str) -> Wanted | None:
    return None


@pytest.fixture
async def setup(fresh_db, encoder_a, encoder_b):
    """Memories written with model A, then the service configured with model B."""
    ensure_table(fresh_db, A.slug, A.dim)
    assert reconcile(fresh_db, A, no_legacy)[1] is None
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    store = GuardedWriter(pool, A.slug)
    await store.add(OWNER, [NewMemory(t) for t in TEXTS], encoder_a.encode(TEXTS))
    ensure_table(fresh_db, B.slug, B.dim)
    active, filling = reconcile(fresh_db, B, no_legacy)
    assert (active.slug, active.state, filling.slug, filling.state) == (
        "model_a",
        "active",
        "model_b",
        "filling",
    )
    assert (filling.done, filling.total) == (0, len(TEXTS))
    yield fresh_db, pool, store
    await pool.close()


def worker(dsn: str, encoder_b, **settings) -> Reembedder:
    async def embed(texts: list[str], ref: str) -> np.ndarray:
        assert ref == B.ref
        return encoder_b.encode(texts)

    conf = ReembedSettings(**{"batch": 2, "rate_per_s": 0, "settle_s": 30, **settings})
    return Reembedder(dsn, embed, conf, ReembedMetrics())


async def rows(pool) -> dict:
    async with pool.connection() as conn:
        return {r.slug: r for r in await models(conn)}


async def count(pool, table: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
        return (await cur.fetchone())["n"]


async def test_fill_resumes_from_its_cursor_repairs_edits_and_switches(setup, encoder_b):
    dsn, pool, store = setup
    first = worker(dsn, encoder_b)
    assert await first.run_once(max_batches=1) == "partial"  # then the replica "restarts"
    reg = await rows(pool)
    assert (reg["model_b"].done, reg["model_b"].state) == (2, "filling")
    assert await count(pool, "memory_vectors_model_b") == 2
    # An edit to a memory the fill already passed (written with model A only)
    listed, _ = await store.memories.list(OWNER, limit=10)
    edited = next(r for r in listed if r["content"] == TEXTS[0])
    new_text = "I am allergic to shellfish, not peanuts"
    await store.update(OWNER, edited["id"], {"content": new_text}, np.zeros(384, np.float32))
    assert reg["model_b"].progress == pytest.approx(0.4)

    second = worker(dsn, encoder_b)
    assert await second.run_once() == "switched"
    reg = await rows(pool)
    assert (reg["model_b"].state, reg["model_a"].state) == ("active", "retired")
    assert reg["model_b"].done == len(TEXTS) and reg["model_b"].cursor_seq > 0
    assert await count(pool, "memory_vectors_model_b") == len(TEXTS)
    async with pool.connection() as conn:  # the edit was embedded again (repair pass)
        cur = await conn.execute(
            "SELECT embedding FROM memory_vectors_model_b WHERE item_id = %s", (edited["id"],)
        )
        stored = np.asarray((await cur.fetchone())["embedding"].to_numpy())
    assert float(stored @ encoder_b.encode([new_text])[0]) > 0.999
    # every memory is found through the new table with the new model's query vectors
    index_b = MemoryIndex(pool, B.slug)
    for text in [new_text, *TEXTS[1:]]:
        [best] = await index_b.nearest(OWNER, encoder_b.encode([text], is_query=True)[0], 1)
        assert best.content == text
    assert second.metrics.state["model-b"] == (1.0, 0)


async def test_one_worker_cluster_wide(setup, encoder_b):
    dsn, pool, _ = setup
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (REEMBED_LOCK,))
        assert await worker(dsn, encoder_b).run_once() == "busy"
    assert await count(pool, "memory_vectors_model_b") == 0


async def test_settle_picks_up_stale_writes_then_old_table_drops(setup, encoder_a, encoder_b):
    dsn, pool, store = setup
    w = worker(dsn, encoder_b)
    assert await w.run_once() == "switched"
    # a replica that has not heard of the switch yet writes the old table only
    late = "I moved to Porto last week"
    [row] = await store.add(OWNER, [NewMemory(late)], encoder_a.encode([late]))
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT version FROM memory_owner_versions WHERE tenant_id = 't1' AND owner = 'alice'"
        )
        before = (await cur.fetchone())["version"]
        with pytest.raises(DropRefused):  # still settling
            await drop_retired(conn, A.slug)
    assert await w.run_once() == "settling"
    index_b = MemoryIndex(pool, B.slug)
    [best] = await index_b.nearest(OWNER, encoder_b.encode([late], is_query=True)[0], 1)
    assert best.id == row["id"]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT version FROM memory_owner_versions WHERE tenant_id = 't1' AND owner = 'alice'"
        )
        assert (await cur.fetchone())["version"] > before  # retriever caches reload it
        await conn.execute("UPDATE embedding_models SET settle_until = now() - interval '1s'")
        with pytest.raises(DropRefused):  # the active table is never dropped
            await drop_retired(conn, B.slug)
        dropped = await drop_retired(conn, A.slug)
        cur = await conn.execute("SELECT to_regclass('memory_vectors_model_a') AS t")
        assert dropped.slug == "model_a" and (await cur.fetchone())["t"] is None
    assert await w.run_once() == "idle"
    assert list(await rows(pool)) == ["model_b"]


async def test_reconcile_abandons_a_fill_when_the_old_model_comes_back(setup, encoder_b):
    dsn, pool, _ = setup
    assert await worker(dsn, encoder_b).run_once(max_batches=1) == "partial"
    active, filling = reconcile(dsn, A, no_legacy)  # configured back to model A
    assert (active.slug, filling) == ("model_a", None)
    assert (await rows(pool))["model_b"].state == "retired"
    assert await worker(dsn, encoder_b).run_once() == "idle"
    # ... and to B again: its table missed writes meanwhile, so it refills from the start
    active, filling = reconcile(dsn, B, no_legacy)
    assert (filling.state, filling.cursor_seq, filling.done) == ("filling", 0, 0)


async def test_legacy_table_is_adopted_as_active(fresh_db, encoder_a):
    """An install from before the registry: its table keeps serving while B fills."""
    ensure_table(fresh_db, A.slug, A.dim)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    try:
        await GuardedWriter(pool, A.slug).add(
            OWNER, [NewMemory(TEXTS[0])], encoder_a.encode(TEXTS[:1])
        )
    finally:
        await pool.close()
    ensure_table(fresh_db, B.slug, B.dim)
    active, filling = reconcile(fresh_db, B, lambda slug: A if slug == A.slug else None)
    assert (active.slug, active.ref, filling.slug, filling.total) == (
        "model_a",
        "ref-a",
        "model_b",
        1,
    )
