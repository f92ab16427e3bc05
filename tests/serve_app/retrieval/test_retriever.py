"""The retriever core against real PostgreSQL + pgvector: modes, cache, freshness, filters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner

DIM = 16
SLUG = "rt16"
A = Owner("t1", "alice")


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def rand(n: int, seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, DIM)))


def core(pool, **groups: dict) -> Retriever:
    return Retriever(pool, SLUG, Settings().with_(**groups))


async def add(store, owner, contents, vectors, **kw):
    items = [NewMemory(content=c, **kw) for c in contents]
    return await store.add(owner, items, np.asarray(vectors), actor="test")


def q(text: str = "", top_k: int = 5, **kw) -> SearchQuery:
    return SearchQuery(tenant_id="t1", user_id="alice", top_k=top_k, text=text, **kw)


WORDS = ["apple", "river", "violin", "garden", "rocket", "winter", "coffee", "island"]


async def seed(store, n: int = 40, seed_: int = 0):
    contents = [f"note {i} about {WORDS[i % 8]} and {WORDS[(i * 3) % 8]}" for i in range(n)]
    return await add(store, A, contents, rand(n, seed_)), rand(n, seed_)


async def test_modes_hot_and_cold_agree(env):
    pool, store = env
    rows, vecs = await seed(store)
    zebra = (await add(store, A, ["the zebra crossing"], rand(1, 99)))[0]
    hot, cold = core(pool), core(pool, cache={"budget_mb": 0})
    for r in (hot, cold, core(pool, retrieval={"fusion": "rrf"})):
        dense = await r.search(q("zebra", mode="dense"), vecs[7])
        assert dense[0]["id"] == rows[7]["id"]
        assert dense[0]["similarity"] == pytest.approx(1.0, abs=1e-4)
        lex = await r.search(q("zebra", mode="lexical"), vecs[7])
        assert [m["id"] for m in lex] == [zebra["id"]]  # only one memory has the word
        hyb = await r.search(q("zebra", mode="hybrid"), vecs[7])
        assert {rows[7]["id"], zebra["id"]} <= {m["id"] for m in hyb[:2]}
        assert all("score" in m and "similarity" in m for m in hyb)
    # same dense answers from the cache (exact flat index) and from pgvector
    for i in range(5):
        a = await hot.search(q(mode="dense", top_k=10), vecs[i] + 0.3 * rand(1, i)[0])
        b = await cold.search(q(mode="dense", top_k=10), vecs[i] + 0.3 * rand(1, i)[0])
        assert [m["id"] for m in a] == [m["id"] for m in b]
    assert hot.served["hot"] > 0 and cold.served["hot"] == 0 and hot.cache.hits > 0


async def test_threshold_applies_to_cosine_even_for_lexical_hits(env):
    pool, store = env
    _, vecs = await seed(store)
    far = -vecs[3]  # the zebra memory points away from the query vector
    zebra = (await add(store, A, ["zebra stripes"], far[None, :]))[0]
    for r in (core(pool), core(pool, cache={"budget_mb": 0})):
        got = await r.search(q("zebra", mode="lexical"), vecs[3])
        assert [m["id"] for m in got] == [zebra["id"]]
        assert got[0]["similarity"] == pytest.approx(-1.0, abs=1e-4)
        assert await r.search(q("zebra", mode="lexical", threshold=0.0), vecs[3]) == []


async def test_never_stale_after_delete_update_add(env):
    pool, store = env
    rows, vecs = await seed(store)
    r = core(pool)
    target = rows[5]
    assert (await r.search(q(mode="dense"), vecs[5]))[0]["id"] == target["id"]
    await store.delete(A, target["id"])
    got = await r.search(q(mode="dense"), vecs[5])
    assert target["id"] not in {m["id"] for m in got}
    # update: new content and a new vector are what the next search sees
    await store.update(A, rows[6]["id"], {"content": "now about kites"}, vecs[5])
    got = await r.search(q("kites", mode="hybrid"), vecs[5])
    assert got[0]["id"] == rows[6]["id"] and got[0]["content"] == "now about kites"
    new = (await add(store, A, ["brand new memory"], -vecs[0][None, :]))[0]
    assert (await r.search(q(mode="dense"), -vecs[0]))[0]["id"] == new["id"]
    assert await store.delete_scope(A) == 40
    assert await r.search(q("note", mode="hybrid"), vecs[1]) == []
    assert r.cache.invalidations >= 4


async def test_selective_filters_still_return_k(env):
    pool, store = env
    await seed(store, n=300)
    tagged = await add(store, A, [f"tagged {i}" for i in range(6)], rand(6, 5), tags=["rare"])
    ids = {m["id"] for m in tagged}
    for r in (core(pool), core(pool, cache={"budget_mb": 0}, retrieval={"pg_exact_scan_max": 0})):
        got = await r.search(q(tags=("rare",), top_k=6, mode="dense"), rand(1, 77)[0])
        assert {m["id"] for m in got} == ids
        got = await r.search(q("note", tags=("rare",), top_k=6), rand(1, 77)[0])
        assert {m["id"] for m in got} == ids  # hybrid: dense finds them, lexical finds none
    # too many matches for the cache's id list: answered by pgvector, still filtered
    r = core(pool, cache={"filter_max_ids": 3})
    got = await r.search(q(tags=("rare",), top_k=6, mode="dense"), rand(1, 77)[0])
    assert {m["id"] for m in got} == ids and r.served["cold"] == 1


async def test_owner_union_and_isolation(env):
    pool, store = env
    mine = (await add(store, A, ["my own note"], rand(1, 1)))[0]
    agent = (await add(store, A, ["agent note"], rand(1, 2), scope="agent", agent_id="a1"))[0]
    org = (await add(store, A, ["org note"], rand(1, 3), scope="org"))[0]
    await add(store, Owner("t1", "bob"), ["bob note"], rand(1, 4))
    await add(store, Owner("t2", "alice"), ["other tenant note"], rand(1, 5))
    for r in (core(pool), core(pool, cache={"budget_mb": 0})):
        own = await r.search(q("note", top_k=10), rand(1, 9)[0])
        assert {m["id"] for m in own} == {mine["id"]}
        union = await r.search(
            q("note", top_k=10, owners=("alice", "@agent:a1", "@org")), rand(1, 9)[0]
        )
        assert {m["id"] for m in union} == {mine["id"], agent["id"], org["id"]}


async def test_an_owner_with_nothing_stored_leaves_the_fusion_as_it_is(env):
    """A context block reads the user's memories and the org's (usually none): the empty
    owner adds no rows and must not turn the score fusion into another one (it sent
    every block's search to RRF: LoCoMo evidence in the block 0.58 -> 0.60 once fixed)."""
    pool, store = env
    _, vecs = await seed(store)
    r = core(pool)
    for i in range(4):
        qv = unit(vecs[i] + 0.5 * rand(1, 50 + i)[0])
        alone = await r.search(q(f"{WORDS[i]} garden", top_k=10), qv)
        with_org = await r.search(q(f"{WORDS[i]} garden", top_k=10, owners=("alice", "@org")), qv)
        assert [m["id"] for m in with_org] == [m["id"] for m in alone]
        assert [m["score"] for m in with_org] == pytest.approx([m["score"] for m in alone])
    rrf = await core(pool, retrieval={"fusion": "rrf"}).search(q("apple garden", top_k=10), vecs[0])
    zscore = await r.search(q("apple garden", top_k=10), vecs[0])
    assert [m["score"] for m in rrf] != [m["score"] for m in zscore]  # the two do differ


async def test_big_owner_answered_by_pgvector_then_cached_as_hnsw(env):
    pool, store = env
    rows, vecs = await seed(store, n=120)
    r = core(pool, cache={"sync_load_max": 50, "hnsw_threshold": 100})
    first = await r.search(q(mode="dense"), vecs[9])
    assert first[0]["id"] == rows[9]["id"] and r.served == {"hot": 0, "cold": 1}
    for _ in range(50):
        if ("t1", "alice") in r.cache:
            break
        await asyncio.sleep(0.05)
    second = await r.search(q(mode="dense"), vecs[9])
    assert second[0]["id"] == rows[9]["id"] and r.served["hot"] == 1
    assert r.cache._entries[("t1", "alice")].kind == "hnsw"


async def test_concurrent_searches_share_one_load(env):
    pool, store = env
    _, vecs = await seed(store)
    r = core(pool)
    calls = 0
    real = r.pg.load_owner

    async def counting(*a):
        nonlocal calls
        calls += 1
        return await real(*a)

    r.pg.load_owner = counting
    results = await asyncio.gather(*(r.search(q(mode="dense"), vecs[i]) for i in range(8)))
    assert all(res for res in results) and calls == 1


async def test_hot_unfiltered_search_answers_from_cached_rows(env, monkeypatch):
    """One round trip: rows come from the fresh entry, identical to pgvector's; an
    expiry that passed since loading (expiry bumps no version) still hides a memory."""
    pool, store = env
    rows, vecs = await seed(store)
    hot, cold = core(pool), core(pool, cache={"budget_mb": 0})
    await hot.search(q(mode="dense"), vecs[2])  # load
    fetched: list[int] = []
    real_fetch = hot.pg.fetch

    async def counting_fetch(query, ids):
        fetched.append(len(ids))
        return await real_fetch(query, ids)

    monkeypatch.setattr(hot.pg, "fetch", counting_fetch)
    a = await hot.search(q(mode="dense"), vecs[2])
    b = await cold.search(q(mode="dense"), vecs[2])

    def fields(ms):
        return [{k: v for k, v in m.items() if k not in ("score", "similarity")} for m in ms]

    assert fields(a) == fields(b)
    assert [m["similarity"] for m in a] == pytest.approx([m["similarity"] for m in b], abs=1e-4)
    stored = {r["id"]: r for r in rows}
    for mode in ("hybrid", "lexical"):
        got = await hot.search(q("garden", mode=mode), vecs[2])
        assert got and all(m["content"] == stored[m["id"]]["content"] for m in got)
    assert fetched == []  # unfiltered + fresh entry: no second statement
    await hot.search(q(mode="dense", types=("semantic",)), vecs[2])
    assert len(fetched) == 1  # filtered: rows read with the filter predicates
    soon = datetime.now(UTC) + timedelta(seconds=1)
    short = (await add(store, A, ["fleeting note"], vecs[3][None, :], expires_at=soon))[0]
    assert (await hot.search(q(mode="dense"), vecs[3]))[0]["id"] == short["id"]
    await asyncio.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.05)
    got = await hot.search(q(mode="dense"), vecs[3])
    assert short["id"] not in {m["id"] for m in got} and got[0]["id"] == rows[3]["id"]
    assert hot.served["cold"] == 0  # all of it answered from the cache


async def test_cache_rows_follow_write_sequence(env):
    """Neighbour smoothing reads an entry's row order as write order: the cache follows
    ``memory_items.seq``, not the table's physical order."""
    pool, store = env
    rows, vecs = await seed(store, n=12)
    await store.update(A, rows[5]["id"], {"content": "edited sixth note"}, vecs[5])
    async with pool.connection() as conn:  # as if the first memory had been written last
        await conn.execute("UPDATE memory_items SET seq = DEFAULT WHERE id = %s", (rows[0]["id"],))
    r = core(pool)
    await r.search(q(mode="dense"), vecs[1])
    entry = r.cache._entries[("t1", "alice")]
    assert entry.ids == [m["id"] for m in rows[1:]] + [rows[0]["id"]]
    assert entry.rows[rows[5]["id"]]["content"] == "edited sixth note"


async def test_a_when_question_prefers_the_memory_that_states_a_time(env):
    pool, store = env
    v = rand(1, 5)[0]
    meta = {"session_date": "2023-05-08T13:56:00"}
    rows = await add(
        store,
        A,
        ["we baked apple pie yesterday", "we baked apple pie together"],
        [v, v],
        metadata=meta,
    )
    plain = core(pool, retrieval={"time_weight": 0.0})
    timed = core(pool, retrieval={"time_weight": 1.0})
    question = q("When did we bake apple pie?", top_k=2)
    got = [m["id"] for m in await timed.search(question, v)]
    assert got == [rows[0]["id"], rows[1]["id"]]
    other = [m["id"] for m in await timed.search(q("Did we bake apple pie?", top_k=2), v)]
    assert other == [m["id"] for m in await plain.search(q("Did we bake apple pie?", top_k=2), v)]
