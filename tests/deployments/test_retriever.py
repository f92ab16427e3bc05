"""The Retriever deployment with TWO replicas: no replica serves a deleted or edited memory.

Both replicas warm their caches for the same user, then the test edits and deletes
through the store (as the ingress does) and searches across both replicas at once.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from serve_app.bootstrap import ModelFacts
from serve_app.db.pool import open_pool
from serve_app.retrieval.query import SearchQuery
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from tests.conftest import scratch_database

APP = "retriever-test"
SLUG, DIM = "all_minilm_l6_v2_int8", 384
A = Owner("default", "carol")


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with scratch_database(pg_admin_dsn, "t_ret") as dsn:
        ensure_table(dsn, SLUG, DIM)
        yield dsn


@pytest.fixture(scope="module")
def retriever(ray_session, db):
    from ray import serve

    from deployments.retriever import Retriever

    env = {"MEMSERVE_DATABASE_URL": db, "MEMSERVE_EMBED_MODEL": "all-minilm-l6-v2-int8"}
    app = Retriever.options(
        name="RetrieverUnderTest",
        num_replicas=2,
        ray_actor_options={"num_cpus": 0.1, "runtime_env": {"env_vars": env}},
    ).bind(ModelFacts("all-minilm-l6-v2-int8", DIM, SLUG))
    handle = serve.run(app, name=APP, route_prefix=None)
    yield handle
    serve.delete(APP)


@pytest.fixture
async def store(db):
    pool = await open_pool(db, Settings(), min_size=1)
    await pool.wait()
    yield GuardedWriter(pool, SLUG)
    await pool.close()


def query(top_k: int = 10, text: str = "", mode: str = "dense") -> SearchQuery:
    return SearchQuery(tenant_id="default", user_id="carol", top_k=top_k, text=text, mode=mode)


async def replica_stats(handle, want: int = 2) -> dict[int, dict]:
    """Stats of every replica (concurrent calls spread over replicas by queue length)."""
    seen: dict[int, dict] = {}
    for _ in range(60):
        for s in await asyncio.gather(*(handle.stats.remote() for _ in range(8))):
            seen[s["pid"]] = s
        if len(seen) >= want:
            break
        await asyncio.sleep(0.5)
    return seen


async def warm_all(handle, vecs) -> dict[int, dict]:
    """Search until every replica holds carol's entry."""
    for _ in range(30):
        await asyncio.gather(*(handle.search.remote(query(), vecs[i % 30]) for i in range(16)))
        stats = await replica_stats(handle)
        if len(stats) == 2 and all(s["entries"] == 1 for s in stats.values()):
            break
    return stats


async def test_two_replicas_never_serve_deleted_or_edited(retriever, store):
    vecs = unit(np.random.default_rng(0).standard_normal((30, DIM)))
    rows = await store.add(
        A, [NewMemory(content=f"fact {i} v0") for i in range(30)], vecs, actor="t"
    )
    # warm both replicas' caches for carol (no shard id: requests spread over replicas)
    stats = await warm_all(retriever, vecs)
    assert len(stats) == 2 and all(s["entries"] == 1 for s in stats.values())

    for i in range(12):
        target = rows[i]
        await store.update(A, target["id"], {"content": f"fact {i} v1"}, vecs[i])
        got = await asyncio.gather(*(retriever.search.remote(query(3), vecs[i]) for _ in range(6)))
        for res in got:
            assert res[0]["id"] == target["id"] and res[0]["content"] == f"fact {i} v1"
        await store.delete(A, target["id"])
        got = await asyncio.gather(*(retriever.search.remote(query(), vecs[i]) for _ in range(6)))
        for res in got:
            assert target["id"] not in {m["id"] for m in res}
            assert all(m["content"].endswith("v0") for m in res)  # untouched ones only
    await store.delete_scope(A)
    got = await asyncio.gather(
        *(retriever.search.remote(query(text="fact", mode="hybrid"), vecs[20]) for _ in range(8))
    )
    assert all(res == [] for res in got)
    stats = await replica_stats(retriever)
    assert sum(s["hot"] for s in stats.values()) > 0
    assert sum(s["notifications"] for s in stats.values()) > 0  # LISTEN reached the replicas


async def test_same_shard_goes_to_the_same_replica(retriever, store):
    owner = Owner("default", "dave")
    vecs = unit(np.random.default_rng(1).standard_normal((5, DIM)))
    await store.add(owner, [NewMemory(content=f"d {i}") for i in range(5)], vecs, actor="t")
    q = SearchQuery(tenant_id="default", user_id="dave", top_k=3, mode="dense")
    h = retriever.options(multiplexed_model_id="shard-7")
    # One search loads shard-7 on exactly one replica; replicas report loaded shards to
    # routers asynchronously, and once known, every request for the shard goes there.
    assert (await h.search.remote(q, vecs[0]))[0]["content"] == "d 0"
    # Sequential requests: routing prefers the replica holding the shard (Serve may
    # spill concurrent bursts to another replica when the preferred one is busy).
    for _ in range(60):
        pids = {(await h.stats.remote())["pid"] for _ in range(10)}
        if len(pids) == 1:
            break
        await asyncio.sleep(0.5)
    assert len(pids) == 1
