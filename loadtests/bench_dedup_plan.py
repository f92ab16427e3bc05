"""Dedup candidates on a big table: EXPLAIN ANALYZE of ``MemoryIndex.nearest``'s query.

Fills a vector table with ``--rows`` rows (default 1M: generate_series, 2,000 users,
``--dim``-d random vectors, HNSW index built) and checks that the dedup query of one
user scans that user's own rows (owner index, exact distances) instead of walking
the global HNSW index and filtering afterwards; the old query is explained too.
Prints both plans and timings, writes ``loadtests/results/bench_dedup_plan-<ts>.json``.

    flock /tmp/memserve-ray.lock .venv/bin/python -m loadtests.bench_dedup_plan
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from loadtests.harness import write_json
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.store.memory_index import _MATCH_COLUMNS, NEAREST_SQL
from serve_app.store.records import column_list
from serve_app.store.vectors import ensure_table

SLUG = "plan"
OLD_SQL = (  # the query before issue 13: global distance order, owner filter afterwards
    "SELECT {cols}, 1 - (v.embedding <=> %(vec)s) AS similarity"
    " FROM memory_items i JOIN {v} v ON v.item_id = i.id"
    " WHERE i.tenant_id = %(tenant_id)s AND i.user_id = %(user_id)s"
    " AND i.status = 'active'{tf} ORDER BY v.embedding <=> %(vec)s LIMIT %(k)s"
)


def fill(conn: psycopg.Connection, rows: int, dim: int, users: int) -> float:
    started = time.perf_counter()
    conn.execute(
        "INSERT INTO memory_items (id, tenant_id, user_id, type, content, dedupe_hash)"
        " SELECT md5(g::text)::uuid, 't', 'u' || (g %% %(users)s), 'fact',"
        " 'memory ' || g, md5(g::text) FROM generate_series(1, %(rows)s) g",
        {"rows": rows, "users": users},
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {v} (item_id, tenant_id, owner, embedding)"
            " SELECT i.id, 't', i.user_id, (SELECT array_agg(random())::vector({dim})"
            " FROM generate_series(1, {dim}) WHERE i.id IS NOT NULL) FROM memory_items i"
        ).format(v=sql.Identifier(f"memory_vectors_{SLUG}"), dim=sql.Literal(dim))
    )
    conn.execute("ANALYZE")
    return time.perf_counter() - started


def explain(conn: psycopg.Connection, template: str, params: dict) -> tuple[list[str], float, int]:
    query = sql.SQL(template).format(
        cols=column_list(_MATCH_COLUMNS, "i"),
        v=sql.Identifier(f"memory_vectors_{SLUG}"),
        tf=sql.SQL(""),
    )
    plan = [r[0] for r in conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + query, params)]
    t0 = time.perf_counter()
    for _ in range(20):
        found = conn.execute(query, params).fetchall()
    return plan, (time.perf_counter() - t0) / 20 * 1000, len(found)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--users", type=int, default=2000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        dsn = server.start()
        try:
            migrate(dsn)
            ensure_table(dsn, SLUG, args.dim)
            with psycopg.connect(dsn, autocommit=True) as conn:  # fill without indexes
                for index in ("hnsw", "owner"):
                    conn.execute(f"DROP INDEX memory_vectors_{SLUG}_{index}")
                fill_s = fill(conn, args.rows, args.dim, args.users)
            t0 = time.perf_counter()
            ensure_table(dsn, SLUG, args.dim)  # builds the HNSW and owner indexes
            index_s = time.perf_counter() - t0
            with psycopg.connect(dsn, autocommit=True) as conn:
                register_vector(conn)
                conn.execute("ANALYZE")
                vec = np.random.default_rng(1).random(args.dim, dtype=np.float32)
                params = {"vec": vec, "tenant_id": "t", "user_id": "u7", "types": [], "k": 5}
                new_plan, new_ms, new_n = explain(conn, NEAREST_SQL, params)
                old_plan, old_ms, old_n = explain(conn, OLD_SQL, params)
                exact = conn.execute(
                    sql.SQL("SELECT count(*) FROM {v} WHERE owner = 'u7'").format(
                        v=sql.Identifier(f"memory_vectors_{SLUG}")
                    )
                ).fetchone()[0]
        finally:
            server.stop()
    result = {
        "rows": args.rows,
        "dim": args.dim,
        "users": args.users,
        "owner_rows": exact,
        "fill_s": round(fill_s, 1),
        "index_s": round(index_s, 1),
        "nearest_ms": round(new_ms, 2),
        "nearest_found": new_n,
        "nearest_plan": new_plan,
        "old_query_ms": round(old_ms, 2),
        "old_query_found": old_n,
        "old_query_plan": old_plan,
        "uses_hnsw": any("hnsw" in line for line in new_plan),
    }
    print("\n".join(["nearest (issue 13):", *new_plan, "", "old query:", *old_plan]))
    print({k: v for k, v in result.items() if not k.endswith("plan")})
    print(f"wrote {write_json('bench_dedup_plan', result)}")


if __name__ == "__main__":
    main()
