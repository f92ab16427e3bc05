"""Big shared owners read through the partial HNSW index, personal owners stay exact
(issue 33 item 4), against real PostgreSQL + pgvector."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

from serve_app.db.pool import open_pool
from serve_app.retrieval.pgvector_search import PgVectorSearch, shared_approx
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import Settings
from serve_app.store.vectors import ensure_table, shared_hnsw_name

DIM = 32
SLUG = "kb32"
ORG_N = 3000
ALICE_N = 300


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """Chunks around 60 topics: true neighbours exist and an approximate index can miss."""
    centres = unit(rng.standard_normal((60, DIM)))
    return unit(centres[rng.integers(0, 60, n)] + 0.5 * rng.standard_normal((n, DIM)))


def insert(dsn: str, owner: str | list[str], vecs: np.ndarray) -> list[uuid.UUID]:
    """Rows as the documents contract stores them (org chunks) or personal memories
    (``owner`` a list: one personal owner per row)."""
    ids = [uuid.uuid4() for _ in vecs]
    owners = owner if isinstance(owner, list) else [owner] * len(vecs)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memory_items (id, tenant_id, user_id, scope, type, source, content,"
                " data, dedupe_hash) VALUES (%s, 't1', %s, %s, %s, 'document', %s, %s, %s)",
                [
                    (
                        i,
                        None if o == "@org" else o,
                        "org" if o == "@org" else "user",
                        "document_chunk" if o == "@org" else "semantic",
                        f"chunk {n}",
                        Jsonb({"document_id": "d", "chunk_index": n}),
                        i.hex,
                    )
                    for n, (i, o) in enumerate(zip(ids, owners, strict=True))
                ],
            )
            cur.executemany(
                f"INSERT INTO memory_vectors_{SLUG} VALUES (%s, 't1', %s, %s)",
                [(i, o, v) for i, o, v in zip(ids, owners, vecs, strict=True)],
            )
        conn.execute("ANALYZE")
    return ids


@pytest.fixture
async def kb(fresh_db):
    """A 3000-chunk org knowledge base and a 300-memory personal owner, partial index on."""
    ensure_table(fresh_db, SLUG, DIM, shared_hnsw=(16, 64))
    rng = np.random.default_rng(5)
    org = clustered(rng, ORG_N)
    alice = clustered(rng, ALICE_N)
    org_ids = insert(fresh_db, "@org", org)
    alice_ids = insert(fresh_db, "alice", alice)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield pool, (org, org_ids), (alice, alice_ids), rng
    await pool.close()


def indexes(dsn: str, table: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (table,)
        )
        return dict(rows.fetchall())


def test_partial_index_is_built_over_shared_owners_and_dropped_when_off(fresh_db) -> None:
    table = ensure_table(fresh_db, "vt", 4, shared_hnsw=(8, 32))
    ddl = indexes(fresh_db, table)[shared_hnsw_name(table)]
    assert "USING hnsw" in ddl and "m='8'" in ddl and "WHERE (owner ~~ '@%'::text)" in ddl
    ensure_table(fresh_db, "vt", 4, shared_hnsw=(8, 32))  # idempotent
    ensure_table(fresh_db, "vt", 4)
    assert shared_hnsw_name(table) not in indexes(fresh_db, table)


def test_an_index_built_with_other_parameters_is_kept_and_said(fresh_db, caplog) -> None:
    """A start whose settings name other m / ef_construction keeps serving the built
    index (a rebuild of 10^6 chunks is minutes) and says how to apply them."""
    table = ensure_table(fresh_db, "vt", 4, shared_hnsw=(8, 32))
    with caplog.at_level("WARNING", logger="memserve"):
        ensure_table(fresh_db, "vt", 4, shared_hnsw=(8, 32))
        assert not caplog.records
        ensure_table(fresh_db, "vt", 4, shared_hnsw=(16, 64))
    assert "m='8'" in indexes(fresh_db, table)[shared_hnsw_name(table)]
    (warning,) = caplog.records
    assert "'m': '8'" in warning.getMessage() and "'m': '16'" in warning.getMessage()


async def test_the_shared_index_scans_its_own_width(fresh_db) -> None:
    """hnsw.ef_search is the shared index's width for a shared owner, the global one's
    otherwise, never below the limit or above pgvector's maximum."""
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    try:
        await widths(pool)
    finally:
        await pool.close()


async def widths(pool) -> None:
    """Each case's ``SHOW hnsw.ef_search`` inside the transaction ``set_hnsw`` set up."""
    pg = PgVectorSearch(pool, SLUG, ef_search=40, shared_ef_search=300)
    wide = PgVectorSearch(pool, SLUG, ef_search=40, shared_ef_search=5000)
    for search, limit, shared, want in (
        (pg, 100, True, "300"),
        (pg, 100, False, "100"),
        (pg, 10, False, "40"),
        (pg, 500, True, "500"),
        (wide, 100, True, "1000"),
    ):
        async with pool.connection() as conn, conn.transaction():
            await search.set_hnsw(conn, limit, shared=shared)
            got = await (await conn.execute("SHOW hnsw.ef_search")).fetchone()
        assert got["hnsw.ef_search"] == want, (limit, shared, got)


def test_only_big_shared_owners_go_approximate() -> None:
    r = Settings().retrieval.model_copy(update={"pg_hnsw_shared_min": 1000})
    counts = {"@org": 5000, "@agent:a": 999, "alice": 10**6}
    assert shared_approx(["alice", "@org", "@agent:a"], counts, r) == ["@org"]
    assert shared_approx(["@org"], {}, r) == []  # size unknown: exact
    off = r.model_copy(update={"pg_hnsw_shared": False})
    assert shared_approx(["@org"], counts, off) == []


async def explain(pool, pg: PgVectorSearch, q: SearchQuery, vec, owners, *, shared: bool) -> str:
    query, params = pg.dense_sql(q, vec, 100, owners, exact=not shared, shared=shared)
    async with pool.connection() as conn, conn.transaction():
        if shared:
            await pg.set_hnsw(conn, 100, shared=True)
        cur = await conn.execute(b"EXPLAIN " + query.as_bytes(conn), params)
        return "\n".join(r["QUERY PLAN"] for r in await cur.fetchall())


async def test_big_shared_owner_uses_the_index_and_finds_the_right_hits(kb) -> None:
    pool, (org, org_ids), (alice, alice_ids), rng = kb
    pg = PgVectorSearch(pool, SLUG, ef_search=40)
    index = shared_hnsw_name(f"memory_vectors_{SLUG}")
    q = SearchQuery(tenant_id="t1", user_id="alice", top_k=10, owners=("alice", "@org"))
    qv = unit(org[7] + 0.1 * rng.standard_normal(DIM))
    plan = await explain(pool, pg, q, qv, ["@org"], shared=True)
    assert index in plan, plan
    personal = await explain(pool, pg, q, qv, ["alice"], shared=False)
    assert index not in personal and "hnsw" not in personal.lower(), personal

    # Recall@10 of the merged (alice exact + org HNSW) result against exact, 30 queries.
    every = np.concatenate([alice, org])
    ids = alice_ids + org_ids
    recalls = []
    for n in range(30):
        qv = unit(every[(n * 97) % len(every)] + 0.3 * rng.standard_normal(DIM))
        truth = {ids[i] for i in np.argsort(-(every @ qv))[:10]}
        rows = await pg.dense(q, qv, 100, exact=True, shared_approx=["@org"])
        assert [r["similarity"] for r in rows] == sorted(
            (r["similarity"] for r in rows), reverse=True
        )
        recalls.append(len({r["id"] for r in rows[:10]} & truth) / 10)
    assert np.mean(recalls) >= 0.95, recalls
    top = await pg.dense(q, org[42], 10, exact=True, shared_approx=["@org"])
    assert top[0]["id"] == org_ids[42] and top[0]["similarity"] == pytest.approx(1.0, abs=1e-5)


async def test_retriever_routes_a_big_shared_owner_to_the_index_and_a_person_exact(kb) -> None:
    pool, (org, org_ids), (alice, alice_ids), rng = kb
    settings = Settings().with_(
        retrieval={"pg_hnsw_shared_min": 1000, "pg_exact_scan_max": 5000}, cache={"budget_mb": 0}
    )
    core = Retriever(pool, SLUG, settings)
    seen: list[tuple[bool, tuple[str, ...]]] = []
    dense = core.pg.dense

    async def spy(q, vec, limit, *, exact, shared_approx=()):  # records the routing only
        seen.append((exact, tuple(shared_approx)))
        return await dense(q, vec, limit, exact=exact, shared_approx=shared_approx)

    core.pg.dense = spy
    both = SearchQuery(
        tenant_id="t1", user_id="alice", top_k=5, mode="dense", owners=("alice", "@org")
    )
    res = await core.search(both, org[11])
    assert seen.pop() == (True, ("@org",))  # alice (300) exact, the org (3000) approximate
    assert res[0]["id"] == org_ids[11]
    res = await core.search(
        SearchQuery(tenant_id="t1", user_id="alice", top_k=5, mode="dense"), alice[3]
    )
    assert seen.pop() == (True, ())
    assert res[0]["id"] == alice_ids[3]


async def test_a_big_knowledge_base_is_not_loaded_into_the_hot_cache(kb) -> None:
    """Above sync_load_max a personal owner loads behind; a shared owner the index serves
    does not (a 10^6-chunk owner would be read and dropped again for the budget)."""
    pool, (org, org_ids), (alice, alice_ids), rng = kb
    settings = Settings().with_(
        retrieval={"pg_hnsw_shared_min": 1000}, cache={"sync_load_max": 200, "budget_mb": 64}
    )
    core = Retriever(pool, SLUG, settings)
    org_q = SearchQuery(tenant_id="t1", user_id="alice", top_k=5, mode="dense", owners=("@org",))
    res = await core.search(org_q, org[5])
    assert res[0]["id"] == org_ids[5] and not core._background
    assert ("t1", "@org") not in core.cache
    await core.search(SearchQuery(tenant_id="t1", user_id="alice", top_k=5, mode="dense"), alice[1])
    await asyncio.gather(*list(core._background))
    assert ("t1", "alice") in core.cache  # 300 > 200: loaded behind, as before
    await core.close()


async def test_the_shared_owner_query_is_never_planned_generically(fresh_db) -> None:
    """psycopg prepares a statement run 5 times; PostgreSQL's generic plan of it does not
    know the owner and may read the owner btree and sort the whole knowledge base (seen
    at 10^5 chunks: 2.3 s instead of ~25-95 ms). The shared path forces custom plans."""
    ensure_table(fresh_db, SLUG, DIM, shared_hnsw=(16, 64))
    rng = np.random.default_rng(9)
    org = clustered(rng, 2000)
    insert(fresh_db, "@org", org)
    # many small owners: a generic plan estimates "owner = $n" at a few rows
    insert(fresh_db, [f"user{n}" for n in range(1000)], clustered(rng, 1000))
    pool = await open_pool(fresh_db, Settings().with_(db={"pool_max": 1}), min_size=1)
    try:
        pg = PgVectorSearch(pool, SLUG, ef_search=40)
        q = SearchQuery(tenant_id="t1", user_id="alice", top_k=10, owners=("@org",))
        for n in range(12):
            await pg.dense(q, org[n], 20, exact=False, shared_approx=["@org"])
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%ORDER BY v.embedding <=>%%'"
            )
            plans = await cur.fetchall()
        assert plans and all(p["generic_plans"] == 0 and p["custom_plans"] >= 5 for p in plans)
    finally:
        await pool.close()
