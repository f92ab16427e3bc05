"""``explain``: each result's score split into its signals, on every retrieval path."""

from __future__ import annotations

import pytest

from serve_app.retrieval.explain import rrf_parts
from serve_app.retrieval.fusion import rrf
from serve_app.settings import Settings
from tests.serve_app.retrieval.test_retriever import DIM, SLUG, A, add, core, q, rand, seed

__all__ = ["DIM", "SLUG"]  # the env fixture reads the vector table's shape from here
PATHS = {
    "hot-zscore": {},
    "hot-rrf": {"retrieval": {"fusion": "rrf"}},
    "cold": {"cache": {"budget_mb": 0}},
}
KEYS = {
    "similarity",
    "lexical",
    "entity",
    "time",
    "neighbour",
    "expansion",
    "relevance",
    "importance",
    "recency",
    "final",
}


@pytest.mark.parametrize("path", PATHS)
async def test_breakdown_adds_up_to_the_score(env, path):
    pool, store = env
    _, vecs = await seed(store)
    zebra = (await add(store, A, ["the zebra crossing in winter"], rand(1, 99)))[0]
    r = core(pool, **PATHS[path])
    plain = await r.search(q("zebra winter"), vecs[5])
    got = await r.search(q("zebra winter", explain=True), vecs[5])
    assert [m["id"] for m in got] == [m["id"] for m in plain]  # explain changes no ranking
    assert all("explain" not in m for m in plain)  # off: nothing computed or attached
    w = Settings().rank
    for m in got:
        e = m["explain"]
        assert set(e) == KEYS
        assert e["final"] == pytest.approx(m["score"], abs=1e-6)
        total = w.w_similarity * e["relevance"] + e["importance"] + e["recency"]
        assert total == pytest.approx(m["score"], abs=1e-5)
        assert e["importance"] == pytest.approx(w.w_importance * m["importance"])
        assert e["similarity"] == pytest.approx(m["similarity"])
        assert "relevance" not in m  # the internal field stays internal
    hit = next(m for m in got if m["id"] == zebra["id"])
    others = [m["explain"]["lexical"] for m in got if m["id"] != zebra["id"]]
    assert hit["explain"]["lexical"] > max(others, default=0.0)  # the keyword match shows


async def test_dense_mode_has_no_lexical_part(env):
    pool, store = env
    _, vecs = await seed(store)
    got = await core(pool).search(q("zebra", mode="dense", explain=True), vecs[2])
    assert got and all(m["explain"]["lexical"] == 0.0 for m in got)
    assert got[0]["explain"]["relevance"] == pytest.approx(got[0]["similarity"])


def test_rrf_lexical_share_matches_fusion():
    dense, lex = ["a", "b", "c"], ["c", "d"]
    fused = rrf([dense, lex], [1.0, 0.5], 10)
    parts = rrf_parts(dense, lex, 0.5, 1.0, 10)
    dense_only = rrf([dense, []], [1.0, 0.5], 10)
    scale = (1.0 / 11) / (1.0 / 11 + 0.5 / 11)  # dense_only is over its own maximum
    assert parts["d"]["lexical"] == pytest.approx(fused["d"])  # only in the lexical list
    assert fused["c"] == pytest.approx(dense_only["c"] * scale + parts["c"]["lexical"])
    assert "a" not in parts
    assert rrf_parts(dense, [], 0.5, 1.0, 10) == {}
