"""Retriever scale benchmark: hot FAISS cache vs cold pgvector at up to 1M memories.

Synthetic data with a planted neighbour structure: every user owns a few topic
centres; each memory is a noisy copy of one centre (unit 384-d vectors) and each
query is a noisy copy of one of the user's memories, so true neighbours exist and
an approximate index can miss them. Most users are small (~90 memories), a few
are big (``--big-users`` x ``--big-size``) so both cache index kinds (flat, HNSW)
and both pgvector plans (exact owner scan, HNSW iterative scan) are measured.

Loading uses binary COPY into a separate database (``memserve_bench``) of an
embedded server under ``--data-dir`` (or ``--dsn``), then builds the HNSW index
with raised ``maintenance_work_mem`` and parallel workers. A loaded database is
reused when its row count matches, so the measure phase can be rerun cheaply.

Latency is retriever-side: the plain-Python :class:`Retriever` core is called in
process (no Ray, no HTTP). Recall@10 is against exact search over the user's own
vectors. Prints a table and writes ``loadtests/results/bench_retrieval-<rows>.json``.

    python loadtests/bench_retrieval.py --rows 20000            # quick run
    python loadtests/bench_retrieval.py --rows 1000000          # full run (long load on 2 cores)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadtests.stats import percentile  # noqa: E402
from serve_app.db.migrations import migrate  # noqa: E402
from serve_app.store.vectors import ensure_table, table_name  # noqa: E402

TENANT = "bench"
SLUG = "bench384"
DIM = 384
DB = "memserve_bench"


# ---------------------------------------------------------------- data


def user_sizes(rows: int, users: int, big_users: int, big_size: int) -> np.ndarray:
    """Rows per user: ``big_users`` of ``big_size``, the rest spread evenly."""
    big_users = min(big_users, users // 10)
    big_size = min(big_size, rows // max(4 * big_users, 1)) if big_users else 0
    rest = rows - big_users * big_size
    small = users - big_users
    sizes = np.full(small, rest // small, dtype=np.int64)
    sizes[: rest - sizes.sum()] += 1
    return np.concatenate([np.full(big_users, big_size, dtype=np.int64), sizes])


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def user_vectors(seed: int, n: int, topics: int = 8, noise: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((max(1, min(topics, n)), DIM)))
    pick = rng.integers(0, len(centres), n)
    return unit(centres[pick] + noise * rng.standard_normal((n, DIM)) / np.sqrt(DIM) * 4)


def user_id(u: int) -> str:
    return f"user{u:06d}"


# ---------------------------------------------------------------- load


def db_dsn(admin_dsn: str) -> str:
    return admin_dsn.replace("/postgres?", f"/{DB}?") if "/postgres?" in admin_dsn else admin_dsn


def loaded_rows(dsn: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            return conn.execute(
                "SELECT count(*) FROM memory_items WHERE tenant_id = %s", (TENANT,)
            ).fetchone()[0]
    except psycopg.Error:
        return -1


def load(admin_dsn: str, sizes: np.ndarray, *, m: int, ef_construction: int) -> dict:
    dsn = db_dsn(admin_dsn)
    rows = int(sizes.sum())
    if loaded_rows(dsn) == rows:
        print(f"reusing loaded database ({rows} rows)")
        migrate(dsn)  # schema changes since it was loaded
        return {"reused": True}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    migrate(dsn)
    vt = table_name(SLUG)
    ensure_table(dsn, SLUG, DIM)
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"{vt}_hnsw")))
        base = datetime(2025, 1, 1, tzinfo=UTC)
        done = 0
        for u, n in enumerate(sizes):
            vecs = user_vectors(u, int(n))
            ids = [uuid.uuid4() for _ in range(n)]
            uid = user_id(u)
            with conn.transaction():
                with conn.cursor().copy(
                    "COPY memory_items (id, tenant_id, user_id, scope, type, content,"
                    " dedupe_hash, importance, created_at, updated_at) FROM STDIN (FORMAT BINARY)"
                ) as cp:
                    cp.set_types(
                        [
                            "uuid",
                            "text",
                            "text",
                            "text",
                            "text",
                            "text",
                            "text",
                            "float4",
                            "timestamptz",
                            "timestamptz",
                        ]
                    )
                    for j, item in enumerate(ids):
                        ts = base + timedelta(minutes=j)
                        cp.write_row(
                            (
                                item,
                                TENANT,
                                uid,
                                "user",
                                "semantic",
                                f"memory {j} of {uid} about topic {j % 8}",
                                item.hex,
                                0.5,
                                ts,
                                ts,
                            )
                        )
                with conn.cursor().copy(
                    sql.SQL(
                        "COPY {} (item_id, tenant_id, owner, embedding) FROM STDIN (FORMAT BINARY)"
                    ).format(sql.Identifier(vt))
                ) as cp:
                    cp.set_types(["uuid", "text", "text", "vector"])
                    for item, v in zip(ids, vecs, strict=True):
                        cp.write_row((item, TENANT, uid, v))
                conn.execute(
                    "INSERT INTO memory_owner_versions (tenant_id, owner, version)"
                    " VALUES (%s, %s, 1)",
                    (TENANT, uid),
                )
            done += int(n)
            if u % 500 == 0:
                print(f"  loaded {done}/{rows} rows ({time.perf_counter() - t0:.0f}s)", flush=True)
        copy_s = time.perf_counter() - t0
        print(f"copied {rows} rows in {copy_s:.0f}s; building HNSW ...", flush=True)
        t1 = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '8GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        conn.execute(
            sql.SQL(
                "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)"
                " WITH (m = {}, ef_construction = {})"
            ).format(
                sql.Identifier(f"{vt}_hnsw"),
                sql.Identifier(vt),
                sql.Literal(m),
                sql.Literal(ef_construction),
            )
        )
        hnsw_s = time.perf_counter() - t1
        conn.execute("VACUUM ANALYZE memory_items")
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(vt)))
    print(f"HNSW built in {hnsw_s:.0f}s", flush=True)
    return {"reused": False, "copy_s": round(copy_s, 1), "hnsw_build_s": round(hnsw_s, 1)}


# ---------------------------------------------------------------- measure


def exact_top(vecs: np.ndarray, ids: list, qv: np.ndarray, k: int) -> set:
    sims = vecs @ qv
    order = np.argsort(-sims)[:k]
    return {ids[i] for i in order}


async def measure(
    admin_dsn: str, sizes: np.ndarray, *, queries: int, k: int, seed: int, ef_search: int
) -> dict:
    from psycopg_pool import AsyncConnectionPool  # noqa: F401 - imported for type clarity

    from serve_app.db.pool import open_pool
    from serve_app.retrieval.query import SearchQuery
    from serve_app.retrieval.retriever import Retriever
    from serve_app.settings import Settings
    from serve_app.store.vectors import as_array

    dsn = db_dsn(admin_dsn)
    migrate(dsn)  # a database loaded by an older version: bring its schema up to date
    settings = Settings(database_url=dsn).with_(
        retrieval={"hnsw_ef_search": ef_search},
        db={"pool_max": 4, "statement_timeout_ms": 120_000},
    )
    pool = await open_pool(dsn, settings, min_size=2)
    await pool.wait()
    rng = np.random.default_rng(seed)
    big = [u for u in range(len(sizes)) if sizes[u] > sizes[-1] * 4]
    small = [u for u in range(len(sizes)) if u not in set(big)]
    groups = {"small": rng.choice(small, size=min(queries, len(small)), replace=False).tolist()}
    if big:
        groups["big"] = [big[i % len(big)] for i in range(min(queries, 4 * len(big)))]

    hot = Retriever(pool, SLUG, settings)
    cold = Retriever(pool, SLUG, settings.with_(cache={"budget_mb": 0}))

    async def user_data(u: int) -> tuple[np.ndarray, list]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT item_id, embedding FROM {} WHERE tenant_id=%s AND owner=%s").format(
                    sql.Identifier(table_name(SLUG))
                ),
                (TENANT, user_id(u)),
            )
            rows = await cur.fetchall()
        return np.stack([as_array(r["embedding"]) for r in rows]), [r["item_id"] for r in rows]

    out: dict = {}
    for gname, users in groups.items():
        cases = []
        for u in users:
            vecs, ids = await user_data(u)
            qv = unit(vecs[rng.integers(0, len(vecs))] + 0.5 * rng.standard_normal(DIM) / 10)
            cases.append((u, qv, exact_top(vecs, ids, qv, k)))
        for label, core, warm in (("hot", hot, True), ("cold", cold, False)):
            lat: list[float] = []
            recalls: list[float] = []
            for u, qv, truth in cases:
                q = SearchQuery(tenant_id=TENANT, user_id=user_id(u), top_k=k, mode="dense")
                if warm:
                    await core.search(q, qv)  # load into the cache (not timed)
                    # a big owner loads in the background: let it finish first
                    await asyncio.gather(*list(core._background), return_exceptions=True)
                t = time.perf_counter()
                res = await core.search(q, qv)
                lat.append((time.perf_counter() - t) * 1000)
                recalls.append(len({r["id"] for r in res} & truth) / max(len(truth), 1))
            out[f"{label}_{gname}"] = {
                "queries": len(cases),
                "p50_ms": round(percentile(lat, 50), 3),
                "p95_ms": round(percentile(lat, 95), 3),
                "p99_ms": round(percentile(lat, 99), 3),
                "recall_at_10": round(float(np.mean(recalls)), 4),
            }
        out[f"hot_{gname}"]["cache"] = hot.cache.stats()
    await pool.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--big-users", type=int, default=10)
    ap.add_argument("--big-size", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dsn", help="admin DSN of a server with pgvector (default: embedded)")
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/memserve-bench"))
    ap.add_argument("--phase", choices=["all", "load", "measure"], default="all")
    args = ap.parse_args()

    users = min(args.users, max(args.rows // 20, 10))
    sizes = user_sizes(args.rows, users, args.big_users, args.big_size)
    server = None
    admin = args.dsn
    if admin is None:
        from serve_app.db.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(args.data_dir)
        admin = server.start()
    try:
        info = {"rows": int(sizes.sum()), "users": len(sizes), "dim": DIM}
        info["sizes"] = {"big_users": int((sizes > sizes[-1] * 4).sum()), "big_size": int(sizes[0])}
        if args.phase in ("all", "load"):
            info["load"] = load(admin, sizes, m=args.m, ef_construction=args.ef_construction)
        if args.phase in ("all", "measure"):
            res = asyncio.run(
                measure(
                    admin,
                    sizes,
                    queries=args.queries,
                    k=args.k,
                    seed=args.seed,
                    ef_search=args.ef_search,
                )
            )
            info["results"] = res
            print(f"\n{'case':<12}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'R@10':>8}")
            for name, r in res.items():
                print(
                    f"{name:<12}{r['queries']:>6}{r['p50_ms']:>10.3f}{r['p95_ms']:>10.3f}"
                    f"{r['p99_ms']:>10.3f}{r['recall_at_10']:>8.4f}"
                )
                if "cache" in r:
                    print(f"{'':<12}cache: {r['cache']}")
        info["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
        info["params"] = vars(args) | {"data_dir": str(args.data_dir)}
        outdir = REPO / "loadtests" / "results"
        outdir.mkdir(parents=True, exist_ok=True)
        path = outdir / f"bench_retrieval-{info['rows']}.json"
        path.write_text(json.dumps(info, indent=2, default=str))
        print(f"wrote {path}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
