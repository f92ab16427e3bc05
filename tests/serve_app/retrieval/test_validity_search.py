"""Search and validity against real PostgreSQL + pgvector: a retired memory leaves the hot
cache at once; ``as_of`` and ``include_invalidated`` are answered from PostgreSQL; date
filters and the time signal use event time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner

DIM = 16
SLUG = "rv16"
A = Owner("t1", "alice")
JAN = datetime(2026, 1, 1, tzinfo=UTC)
JUN = datetime(2026, 6, 1, tzinfo=UTC)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def rand(n: int, seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, DIM)))


def q(text: str = "", top_k: int = 10, **kw) -> SearchQuery:
    return SearchQuery(tenant_id="t1", user_id="alice", top_k=top_k, text=text, **kw)


async def seed(store):
    vecs = rand(3, 0)
    contents = ["The user lives in Paris", "The user likes jazz", "The user has a cat"]
    items = [NewMemory(content=c, valid_from=JAN) for c in contents]
    return await store.add(A, items, vecs, actor="t"), vecs


def ids(rows) -> list:
    return [r["id"] for r in rows]


async def test_patch_valid_until_leaves_the_hot_cache_at_once(env):
    pool, store = env
    rows, vecs = await seed(store)
    paris = rows[0]
    r = Retriever(pool, SLUG, Settings())
    assert (await r.search(q("Paris"), vecs[0]))[0]["id"] == paris["id"]
    assert (("t1", "alice") in r.cache) and r.served["hot"] == 1
    await store.update(A, paris["id"], {"valid_until": JUN}, None, event="INVALIDATE")
    for mode in ("hybrid", "dense", "lexical"):
        got = await r.search(q("Paris", mode=mode), vecs[0])
        assert paris["id"] not in ids(got)
    assert r.served["hot"] >= 2  # answered hot, from a reloaded entry (version moved on)
    entry = r.cache.get(("t1", "alice"), 0)
    assert entry is not None and paris["id"] not in entry.ids  # the cache holds what is valid
    # The past and the audit view still find it (from PostgreSQL, never the cache).
    hot_before = r.served["hot"]
    then = await r.search(q("Paris", as_of=JAN + timedelta(days=30)), vecs[0])
    assert then[0]["id"] == paris["id"] and then[0]["valid_until"] == JUN
    audit = await r.search(q("Paris", include_invalidated=True), vecs[0])
    assert paris["id"] in ids(audit)
    later = await r.search(q("Paris", as_of=JUN + timedelta(days=1)), vecs[0])
    assert paris["id"] not in ids(later)
    assert r.served["hot"] == hot_before


async def test_supersedes_swaps_the_answer_in_a_warm_cache(env):
    pool, store = env
    rows, vecs = await seed(store)
    r = Retriever(pool, SLUG, Settings())
    assert (await r.search(q("where does the user live"), vecs[0]))[0]["id"] == rows[0]["id"]
    [berlin] = await store.add(
        A,
        [NewMemory(content="The user lives in Berlin", valid_from=JUN, supersedes=[rows[0]["id"]])],
        unit(vecs[0:1] + 0.05 * rand(1, 7)),
        actor="t",
    )
    got = await r.search(q("where does the user live"), vecs[0])
    assert got[0]["id"] == berlin["id"] and rows[0]["id"] not in ids(got)


async def test_a_planned_end_passing_hides_a_cached_row(env):
    pool, store = env
    rows, vecs = await seed(store)
    r = Retriever(pool, SLUG, Settings())
    soon = datetime.now(UTC) + timedelta(seconds=1)
    await store.update(A, rows[1]["id"], {"valid_until": soon}, None)
    assert rows[1]["id"] in ids(await r.search(q("jazz"), vecs[1]))
    async with pool.connection() as conn:  # time passes: no write, no version bump
        await conn.execute("SELECT pg_sleep(1.2)")
    assert rows[1]["id"] not in ids(await r.search(q("jazz"), vecs[1]))


async def test_date_filters_use_event_time(env):
    pool, store = env
    rows, vecs = await seed(store)  # written now, true since January
    for r in (
        Retriever(pool, SLUG, Settings()),
        Retriever(pool, SLUG, Settings().with_(cache={"budget_mb": 0})),
    ):
        feb = datetime(2026, 2, 1, tzinfo=UTC)
        assert set(ids(await r.search(q("user", created_before=feb), vecs[0]))) == set(ids(rows))
        assert await r.search(q("user", created_after=feb), vecs[0]) == []
