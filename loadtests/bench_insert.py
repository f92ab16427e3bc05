"""What the global pgvector HNSW index costs a batch insert, and what it buys a search.

Issue 23: a 100-memory batch spent ~110 ms of its time in HNSW insertion. This loads
``bench_retrieval``'s synthetic corpus once (no index), then for each index setting
(``m``/``ef_construction`` pairs, and ``none``: no global HNSW, every dense query an
owner scan) builds the index (timed), inserts ``--batches`` batches of 100 memories
into random owners, each batch one transaction of items + vectors as the store writes
them (timed; rolled back so every setting sees the same table), and runs
``bench_retrieval.measure`` for recall@10 against exact search and latency of the
cold (pgvector) path. Only big owners (above ``MEMSERVE_PG_EXACT_SCAN_MAX``) read
through the HNSW index; small owners use the owner btree whatever the index.

    python -m loadtests.bench_insert --rows 100000 --configs 16:64,16:32,8:32,none

Writes ``loadtests/results/bench_insert-<rows>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from loadtests.bench_retrieval import (
    TENANT,
    db_dsn,
    load,
    measure,
    user_id,
    user_sizes,
    user_vectors,
)
from loadtests.stats import percentile
from serve_app.store.vectors import table_name

SLUG = "bench384"
BATCH = 100


def set_index(dsn: str, config: str) -> float:
    """Drop the HNSW index and build the one ``config`` names (``m:efc`` or ``none``);
    seconds the build took."""
    vt = table_name(SLUG)
    idx = sql.Identifier(f"{vt}_hnsw")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"{vt}_hnsw",)
        ).fetchone()
        if row and config != "none":
            m, efc = config.split(":")
            if f"m='{m}', ef_construction='{efc}'" in row[0]:
                return float("nan")  # already built as wanted (by the load: its time is there)
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(idx))
        if config == "none":
            return 0.0
        m, efc = (int(x) for x in config.split(":"))
        # As the load builds it: the whole graph in memory (1M x 384 needs ~3 GB).
        conn.execute("SET maintenance_work_mem = '8GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        t = time.perf_counter()
        conn.execute(
            sql.SQL(
                "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)"
                " WITH (m = {}, ef_construction = {})"
            ).format(idx, sql.Identifier(vt), sql.Literal(m), sql.Literal(efc))
        )
        return time.perf_counter() - t


def insert_batches(dsn: str, sizes: np.ndarray, batches: int, seed: int) -> dict:
    """Time ``batches`` inserts of 100 items + vectors (one transaction each, rolled back)."""
    rng = np.random.default_rng(seed)
    vt = sql.Identifier(table_name(SLUG))
    lat: list[float] = []
    now = datetime.now(UTC)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        for b in range(batches):
            u = int(rng.integers(0, len(sizes)))
            vecs = user_vectors(10_000_000 + b, BATCH)
            ids = [uuid.uuid4() for _ in range(BATCH)]
            t = time.perf_counter()
            conn.execute(
                "INSERT INTO memory_items (id, tenant_id, user_id, scope, type, content,"
                " dedupe_hash, importance, created_at, updated_at)"
                " SELECT i, %s, %s, 'user', 'semantic', 'inserted ' || i::text, i::text, 0.5,"
                " %s, %s FROM unnest(%s::uuid[]) AS i",
                (TENANT, user_id(u), now, now, ids),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} (item_id, tenant_id, owner, embedding) VALUES (%s,%s,%s,%s)"
                    ).format(vt),
                    [(i, TENANT, user_id(u), v) for i, v in zip(ids, vecs, strict=True)],
                )
            lat.append((time.perf_counter() - t) * 1000)
            conn.rollback()
    return {
        "batches": batches,
        "p50_ms": round(percentile(lat, 50), 2),
        "p95_ms": round(percentile(lat, 95), 2),
        "mean_ms": round(statistics.fmean(lat), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--big-users", type=int, default=2)
    ap.add_argument("--big-size", type=int, default=10_000)
    ap.add_argument("--configs", default="16:64,16:32,8:32,none")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--ef-search", type=int, default=128)  # RetrievalSettings.hnsw_ef_search
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/memserve-bench-insert"))
    args = ap.parse_args()

    from serve_app.db.embedded import EmbeddedPostgres

    users = max(args.rows // 20, 10)
    sizes = user_sizes(args.rows, users, args.big_users, args.big_size)
    server = EmbeddedPostgres(args.data_dir)
    admin = server.start()
    out: dict = {"rows": int(sizes.sum()), "big_size": int(sizes[0]), "params": vars(args)}
    try:
        out["load"] = load(admin, sizes, m=16, ef_construction=64)
        dsn = db_dsn(admin)
        out["configs"] = {}
        for config in args.configs.split(","):
            row: dict = {"build_s": round(set_index(dsn, config), 1)}
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table_name(SLUG))))
            row["insert_100"] = insert_batches(dsn, sizes, args.batches, seed=11)
            res = asyncio.run(
                measure(admin, sizes, queries=args.queries, k=10, seed=7, ef_search=args.ef_search)
            )
            row["search"] = {k: v for k, v in res.items() if k.startswith("cold")}
            out["configs"][config] = row
            big = row["search"].get("cold_big", {})
            print(
                f"{config:>8}: build {row['build_s']:6.1f}s  insert/100 p50"
                f" {row['insert_100']['p50_ms']:7.1f} ms  cold big p50 {big.get('p50_ms')} ms"
                f" R@10 {big.get('recall_at_10')}",
                flush=True,
            )
    finally:
        server.stop()
    path = Path(__file__).parent / "results" / f"bench_insert-{out['rows']}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
