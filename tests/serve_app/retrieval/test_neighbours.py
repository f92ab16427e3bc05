"""Neighbour smoothing of fused scores: the pure functions and the retriever's hybrid path."""

from __future__ import annotations

import numpy as np
import pytest

from serve_app.retrieval.cache import OwnerIndex, index_params
from serve_app.retrieval.neighbours import (
    neighbour_boost,
    neighbour_weight,
    sequential_coherence,
)
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner

DIM = 16
SLUG = "nb16"
A = Owner("t1", "alice")


PARAMS = index_params(Settings())  # the defaults; tests override a field


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def walk(n: int, seed: int = 0, dims: slice = slice(None)) -> np.ndarray:
    """A coherent stream: each vector a small step from the previous one."""
    steps = np.zeros((n, DIM))
    steps[:, dims] = np.random.default_rng(seed).standard_normal((n, DIM))[:, dims]
    return unit(np.cumsum(steps, axis=0))


# ---------------------------------------------------------------- pure functions


def test_boost_adds_the_best_positive_neighbour():
    s = np.array([0.0, 5.0, -1.0, 0.5, 2.0])
    got = neighbour_boost(s, 0.4)
    np.testing.assert_allclose(got, [2.0, 5.0, 1.0, 1.3, 2.2])
    np.testing.assert_array_equal(s, [0.0, 5.0, -1.0, 0.5, 2.0])  # input untouched
    # below-average neighbours never lower a score
    np.testing.assert_allclose(neighbour_boost(np.array([-1.0, -2.0]), 0.5), [-1.0, -2.0])


def test_boost_links_only_consecutive_positions():
    s = np.array([4.0, 0.0, 0.0, 3.0, 0.0])
    got = neighbour_boost(s, 0.5, positions=np.array([0, 1, 3, 4, 10]))
    # 0-1 and 3-4 are neighbours; 1 and 3 (a filtered-out row between) and 4-10 are not
    np.testing.assert_allclose(got, [4.0, 2.0, 1.5, 3.0, 0.0])


def test_boost_weight_zero_single_item_and_per_item_weights():
    s = np.array([1.0, 3.0, 2.0])
    np.testing.assert_array_equal(neighbour_boost(s, 0.0), s)
    np.testing.assert_array_equal(neighbour_boost(np.array([7.0]), 0.9), [7.0])
    got = neighbour_boost(s, np.array([1.0, 0.0, 0.5]))
    np.testing.assert_allclose(got, [4.0, 3.0, 3.5])


def test_coherence_of_a_stream_and_of_shuffled_rows():
    x = walk(400, seed=1)
    coherent = sequential_coherence(x)
    shuffled = sequential_coherence(x[np.random.default_rng(2).permutation(len(x))])
    assert coherent > 0.5
    assert abs(shuffled) < 0.05
    assert (
        abs(sequential_coherence(unit(np.random.default_rng(3).standard_normal((400, DIM))))) < 0.05
    )
    assert sequential_coherence(x[:2]) == 0.0  # too few rows to say
    assert sequential_coherence(np.tile(x[:1], (5, 1))) == 0.0  # all alike: no order signal


def test_neighbour_weight_ramps_with_coherence():
    assert neighbour_weight(0.4, -0.2, 0.1) == 0.0
    assert neighbour_weight(0.4, 0.05, 0.1) == pytest.approx(0.2)
    assert neighbour_weight(0.4, 0.3, 0.1) == pytest.approx(0.4)
    assert neighbour_weight(0.4, 0.0, 0.0) == 0.4  # no gate


def test_owner_index_coherence_is_cached_and_zero_for_hnsw():
    x = walk(50, seed=4)
    ids = list(range(50))
    docs = [{"w": 1}] * 50
    flat = OwnerIndex.build(("t", "o"), 1, ids, x, docs, **{**PARAMS, "hnsw_threshold": 1000})
    assert flat.coherence() == pytest.approx(sequential_coherence(x), abs=1e-6)
    flat.coherence_ = 0.123  # computed once: the stored value is what is used
    assert flat.coherence() == 0.123
    hnsw = OwnerIndex.build(("t", "o"), 1, ids, x, docs, **{**PARAMS, "hnsw_threshold": 10})
    assert hnsw.coherence() == 0.0


# ---------------------------------------------------------------- retriever


QUERY = unit(np.eye(DIM)[0])  # the query's direction; the stream lies orthogonal to it
HIT, DISTRACTOR = 10, 30


async def store_stream(store, fillers: np.ndarray) -> list[dict]:
    """40 memories in one batch: a question that matches the query at HIT, its answer
    (no shared word, orthogonal vector) right after it, a half-similar distractor."""
    vecs = fillers.copy()
    vecs[HIT] = QUERY
    vecs[DISTRACTOR] = unit(0.5 * QUERY + 0.87 * fillers[DISTRACTOR])
    contents = [f"note {i} about the weather" for i in range(40)]
    contents[HIT] = "Where did you go on holiday?"
    contents[HIT + 1] = "Paris, with my sister."
    contents[DISTRACTOR] = "something else entirely"
    tags = [["t"] if i in (HIT, HIT + 2, DISTRACTOR) or i > 15 else [] for i in range(40)]
    items = [NewMemory(content=c, tags=t) for c, t in zip(contents, tags, strict=True)]
    return await store.add(A, items, vecs, actor="test")


def q(top_k: int, **kw) -> SearchQuery:
    return SearchQuery(tenant_id="t1", user_id="alice", top_k=top_k, text="holiday", **kw)


async def test_hybrid_lifts_the_neighbours_of_a_hit_in_a_coherent_stream(env):
    pool, store = env
    rows = await store_stream(store, walk(40, seed=5, dims=slice(1, None)))
    ids = [r["id"] for r in rows]
    smooth = Retriever(pool, SLUG, Settings())
    plain = Retriever(pool, SLUG, Settings().with_(retrieval={"fusion_neighbour_weight": 0.0}))
    got = [m["id"] for m in await smooth.search(q(3), QUERY)]
    assert got[0] == ids[HIT] and set(got[1:]) == {ids[HIT - 1], ids[HIT + 1]}
    got = [m["id"] for m in await plain.search(q(3), QUERY)]
    assert got[:2] == [ids[HIT], ids[DISTRACTOR]]
    # filtered: HIT + 2 follows HIT among the allowed rows but was not written next to it
    got = [m["id"] for m in await smooth.search(q(2, tags=("t",)), QUERY)]
    assert got == [ids[HIT], ids[DISTRACTOR]]
    # dense and lexical modes are untouched
    for mode in ("dense", "lexical"):
        a = await smooth.search(q(5, mode=mode), QUERY)
        b = await plain.search(q(5, mode=mode), QUERY)
        assert [m["id"] for m in a] == [m["id"] for m in b]


async def test_no_lift_when_the_order_carries_no_signal(env):
    pool, store = env
    fillers = np.zeros((40, DIM), dtype=np.float32)
    fillers[:, 1:] = np.random.default_rng(6).standard_normal((40, DIM - 1))
    rows = await store_stream(store, unit(fillers))  # unrelated memories: no coherence
    ids = [r["id"] for r in rows]
    got = [m["id"] for m in await Retriever(pool, SLUG, Settings()).search(q(2), QUERY)]
    assert got == [ids[HIT], ids[DISTRACTOR]]
