"""PgVectorSearch's statements against real PostgreSQL: every filter, every query shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from psycopg import sql

from serve_app.retrieval.pgvector_search import PgVectorSearch
from serve_app.retrieval.query import SearchQuery, item_filters
from serve_app.store import NewMemory, Owner

DIM = 8
SLUG = "pg8"
A = Owner("t1", "alice")


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def q(**kw) -> SearchQuery:
    return SearchQuery(tenant_id="t1", user_id="alice", top_k=10, **kw)


def test_item_filters_binds_every_filter_by_name():
    now = datetime.now(UTC)
    full = q(
        types=("episodic",),
        tags=("x",),
        agent_id="a1",
        session_id="s1",
        metadata={"k": 1},
        created_after=now,
        created_before=now,
        owners=("alice", "@org"),
    )
    where, params = item_filters(full, alias="m")
    text = where.as_string(None)
    assert "%s" not in text and '"m".' in text
    assert set(params) == {
        "tenant_id",
        "owners",
        "types",
        "tags",
        "agent_id",
        "session_id",
        "metadata",
        "created_after",
        "created_before",
    }
    assert all(f"%({name})s" in text for name in params)
    assert params["owners"] == ["alice", "@org"] and params["tags"] == ["x"]
    # unfiltered: only the tenant/owner/status/expiry predicates
    where, params = item_filters(q())
    assert set(params) == {"tenant_id", "owners"}
    assert isinstance(where, sql.Composable)


async def test_every_filter_and_shape_against_postgres(env):
    pool, store = env
    vecs = unit(np.random.default_rng(0).standard_normal((5, DIM)))
    items = [
        NewMemory("plain apple note"),
        NewMemory("tagged apple note", type="episodic", tags=["x", "y"]),
        NewMemory("agent apple note", agent_id="a1", session_id="s1", metadata={"k": 1}),
        NewMemory("expired apple note", expires_at=datetime.now(UTC) - timedelta(days=1)),
    ]
    ids = [m["id"] for m in await store.add(A, items, vecs[:4], actor="test")]
    await store.add(Owner("t2", "alice"), [NewMemory("other tenant apple")], vecs[4:], actor="test")
    pg = PgVectorSearch(pool, SLUG, ef_search=40)
    now = datetime.now(UTC)
    cases: list[tuple[dict, set]] = [
        ({}, {ids[0], ids[1], ids[2]}),  # never the expired row, never the other tenant
        ({"types": ("episodic",)}, {ids[1]}),
        ({"tags": ("y", "z")}, {ids[1]}),
        ({"agent_id": "a1"}, {ids[2]}),
        ({"session_id": "s1", "metadata": {"k": 1}}, {ids[2]}),
        ({"metadata": {"k": 2}}, set()),
        ({"created_after": now - timedelta(hours=1)}, {ids[0], ids[1], ids[2]}),
        ({"created_before": now - timedelta(hours=1)}, set()),
    ]
    probe = await pg.probe(q(text="apples"), count_cap=100, want_terms=True, allowed_cap=10)
    assert probe.counts == {"alice": 4} and probe.versions["alice"] > 0
    assert probe.terms == {"appl": 1} and probe.allowed is None
    for kw, want in cases:
        sq = q(text="apple", **kw)
        for exact in (True, False):
            got = await pg.dense(sq, vecs[0], 10, exact=exact)
            assert {r["id"] for r in got} == want, (kw, exact)
        got = await pg.lexical(sq, vecs[0], {"appl": 1}, 10)
        assert {r["id"] for r in got} == want and all(r["lexical"] > 0 for r in got), kw
        assert set(await pg.fetch(sq, ids)) == want, kw
        for cap in (0, 50):
            probe = await pg.probe(sq, count_cap=cap, want_terms=False, allowed_cap=10)
            assert probe.versions == {"alice": probe.versions["alice"]}
            if sq.filtered:
                assert set(probe.allowed) == want, kw
    probe = await pg.probe(q(tags=("x",)), count_cap=0, want_terms=False, allowed_cap=0)
    assert probe.allowed is None and not probe.allowed_overflow
    probe = await pg.probe(q(tags=("x", "y", "z")), count_cap=0, want_terms=False, allowed_cap=1)
    assert probe.allowed == [ids[1]]
    probe = await pg.probe(
        q(types=("semantic", "episodic")), count_cap=0, want_terms=False, allowed_cap=1
    )
    assert probe.allowed_overflow and probe.allowed is None
    loaded = await pg.load_owner("t1", "alice")
    # An expired row is never loaded into the cache (it would be served until a reload).
    assert loaded.ids == ids[:3] and loaded.vectors.shape == (3, DIM)
    assert loaded.version == probe.versions["alice"]
    assert (await pg.load_owner("t2", "bob")).ids == []


async def test_hot_statements_are_auto_prepared(env):
    """Named parameters still reach the server as one $n statement psycopg prepares."""
    pool, store = env
    await store.add(A, [NewMemory("a note")], unit(np.ones((1, DIM))), actor="test")
    pg = PgVectorSearch(pool, SLUG, ef_search=40)
    for _ in range(6):  # psycopg prepares a statement on its 5th execution
        await pg.probe(q(), count_cap=0, want_terms=False, allowed_cap=0)
        await pg.dense(q(tags=("x",)), np.ones(DIM), 5, exact=False)
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [r["statement"] for r in await cur.fetchall()]
    probe = [s for s in prepared if "memory_owner_versions" in s]
    assert len(probe) == 1 and "ANY($2)" in probe[0] and "%(" not in probe[0]
    dense = [s for s in prepared if "<=>" in s]  # the vector is bound once, used twice
    assert len(dense) == 1 and dense[0].count("<=> $1") == 2
