"""Pure parts of retrieval: tsvector parsing, BM25, RRF, the FAISS cache and its LRU."""

from __future__ import annotations

import numpy as np

from serve_app.retrieval.cache import HotCache, OwnerIndex, index_params
from serve_app.retrieval.fusion import rrf
from serve_app.retrieval.lexical import BM25, or_tsquery, parse_tsvector
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.shards import shard_of
from serve_app.settings import Settings

PARAMS = index_params(Settings())  # the defaults; tests override a field


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_parse_tsvector_counts_positions_and_unescapes():
    assert parse_tsvector("'caroline':1,7 'o''brien':3 'run':2A,5B") == {
        "caroline": 2,
        "o'brien": 1,
        "run": 2,
    }
    assert parse_tsvector("") == {} and parse_tsvector(None) == {}


def test_or_tsquery_quotes_lexemes():
    assert or_tsquery({"b": 1, "o'x": 1}) == "'b' | 'o''x'"
    assert or_tsquery({}) == ""


def test_bm25_prefers_rare_terms_and_respects_allowed_rows():
    docs = [{"caroline": 1, "paint": 1}, {"caroline": 1}, {"caroline": 1}, {"melanie": 1}]
    bm = BM25(docs, k1=1.2, b=0.75)  # textbook Okapi parameters
    top = bm.top(["caroline", "paint"], k=2)
    assert top[0][0] == 0  # the rare term decides
    assert [r for r, _ in bm.top(["caroline", "paint"], 5, np.array([1, 3]))] == [1]
    assert bm.top(["nothing"], 3) == []


def test_rrf_is_normalised_and_rewards_agreement():
    fused = rrf([["a", "b"], ["a", "c"]], [1.0, 1.0], k=60)
    assert fused["a"] == 1.0
    assert fused["b"] == fused["c"] < 0.5
    assert rrf([[], []], [1.0, 1.0], k=60) == {}
    only_lex = rrf([[], ["x"]], [1.0, 1.0], k=60)
    assert only_lex["x"] == 1.0


def test_flat_is_exact_and_hnsw_has_high_recall():
    rng = np.random.default_rng(1)
    x = unit(rng.standard_normal((3000, 32)))
    ids = list(range(3000))
    docs = [{} for _ in ids]
    flat = OwnerIndex.build(("t", "u"), 1, ids, x, docs, **{**PARAMS, "hnsw_threshold": 10_000})
    hnsw = OwnerIndex.build(("t", "u"), 1, ids, x, docs, **{**PARAMS, "hnsw_threshold": 100})
    assert (flat.kind, hnsw.kind) == ("flat", "hnsw")
    recall = []
    for q in unit(rng.standard_normal((50, 32))):
        truth = set(np.argsort(-(x @ q))[:10].tolist())
        assert {i for i, _ in flat.dense(q, 10)} == truth
        recall.append(len({i for i, _ in hnsw.dense(q, 10)} & truth) / 10)
    assert np.mean(recall) >= 0.95
    # restricted search is exact over the allowed rows only
    allowed = np.arange(0, 3000, 7)
    got = [i for i, _ in hnsw.dense(x[14], 3, allowed)]
    assert got[0] == 14 and all(i % 7 == 0 for i in got)
    sims = flat.similarity(x[5], [5, 6])
    assert abs(sims[5] - 1.0) < 1e-5 and sims[6] < 1.0


def entry(owner: str, n: int, version: int = 1) -> OwnerIndex:
    x = unit(np.random.default_rng(0).standard_normal((n, 16)))
    return OwnerIndex.build(
        ("t", owner), version, list(range(n)), x, [{}] * n, **{**PARAMS, "hnsw_threshold": 10**6}
    )


def test_cache_lru_eviction_under_budget_and_versions():
    one = entry("a", 100).nbytes()
    cache = HotCache(int(one * 2.5))
    for o in "abc":
        assert cache.put(entry(o, 100))
    assert ("t", "a") not in cache and len(cache) == 2 and cache.evictions == 1
    assert cache.nbytes <= cache.budget
    assert cache.get(("t", "b"), 1) is not None  # b is now most recent
    cache.put(entry("d", 100))
    assert ("t", "c") not in cache and ("t", "b") in cache
    # a newer version in the database makes the entry stale: dropped, counted as a miss
    assert cache.get(("t", "b"), 2) is None and ("t", "b") not in cache
    assert cache.hits == 1 and cache.misses == 1
    # an entry bigger than the budget is not cached
    assert not HotCache(10).put(entry("z", 100))
    # invalidation by notification only drops older entries
    assert not cache.invalidate("t", "d", 1) and cache.invalidate("t", "d", 2)


def test_shard_key_is_stable_and_spread():
    assert shard_of("t", "alice", 64) == shard_of("t", "alice", 64)
    assert len({shard_of("t", f"u{i}", 16) for i in range(200)}) == 16


def test_owner_keys_default_to_the_user():
    assert SearchQuery("t", "alice", 5).owner_keys == ("alice",)
    q = SearchQuery("t", "alice", 5, owners=("alice", "@org"))
    assert q.owner_keys == ("alice", "@org")
