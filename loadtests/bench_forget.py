"""How long a forget of one user with many memories takes (store level, no Ray).

    python -m loadtests.bench_forget                   # 200,000 memories, HNSW index on
    python -m loadtests.bench_forget --memories 50000 --no-hnsw

Starts an embedded PostgreSQL in a temporary directory, builds the user's rows fast
(generate_series: items, 384-d vectors, ADD history, facts, turns), then runs
``ForgetStore.forget`` under the service's 5 s statement timeout and, for comparison,
one single-statement delete of another user of the same size (the old behaviour).
Prints and writes loadtests/results/bench_forget.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import psycopg

from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.vectors import ensure_table

RESULTS = Path(__file__).with_name("results")
DIM = 384

_LOAD = """
INSERT INTO memory_items (id, tenant_id, user_id, scope, type, content, dedupe_hash)
SELECT gen_random_uuid(), 't', %(user)s, 'user', 'semantic',
       'memory number ' || g || ' about topic ' || (g %% 97), md5(g::text)
FROM generate_series(1, %(n)s) g;
INSERT INTO memory_vectors_bench (item_id, tenant_id, owner, embedding)
SELECT i.id, 't', %(user)s, v.e FROM memory_items i
JOIN LATERAL (SELECT (SELECT array_agg(random()::real) FROM generate_series(1, 384) d
     WHERE i.id IS NOT NULL)::vector AS e) v ON true
WHERE i.tenant_id = 't' AND i.user_id = %(user)s;
INSERT INTO memory_history (memory_id, tenant_id, user_id, event, new_content)
SELECT id, 't', %(user)s, 'ADD', content FROM memory_items
WHERE tenant_id = 't' AND user_id = %(user)s;
INSERT INTO facts (id, tenant_id, user_id, category, key, value)
SELECT gen_random_uuid(), 't', %(user)s, 'c' || g, 'k', 'v' FROM generate_series(1, 50) g;
INSERT INTO session_turns (tenant_id, user_id, session_id, turn_index, role, content)
SELECT 't', %(user)s, 's' || (g / 100), g, 'user', 'turn ' || g FROM generate_series(1, 2000) g;
"""


def load(dsn: str, user: str, n: int) -> float:
    t = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for stmt in filter(str.strip, _LOAD.split(";\n")):
            conn.execute(stmt, {"user": user, "n": n})
    return time.perf_counter() - t


async def forget(dsn: str, user: str, batch: int) -> tuple[float, dict[str, int]]:
    pool = await open_pool(dsn, Settings(), min_size=1)  # 5 s statement timeout
    try:
        store = ForgetStore(pool, "bench", batch=batch)
        t = time.perf_counter()
        counts = await store.forget(Scope("t", user))
        return time.perf_counter() - t, counts
    finally:
        await pool.close()


def single_statement(dsn: str, user: str, timeout_ms: int) -> dict:
    """The old way: one DELETE of every memory of the user, under the statement timeout."""
    t = time.perf_counter()
    try:
        with psycopg.connect(
            dsn, autocommit=True, options=f"-c statement_timeout={timeout_ms}"
        ) as c:
            c.execute("DELETE FROM memory_items WHERE tenant_id = 't' AND user_id = %s", (user,))
        return {"completed": True, "seconds": round(time.perf_counter() - t, 2)}
    except psycopg.errors.QueryCanceled:
        return {"completed": False, "seconds": round(time.perf_counter() - t, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--memories", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=Settings().lifecycle.forget_batch)
    ap.add_argument("--no-hnsw", action="store_true", help="vector table without its HNSW index")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memserve-bench-forget-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            migrate(dsn)
            ensure_table(dsn, "bench", DIM)
            if args.no_hnsw:
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.execute("DROP INDEX memory_vectors_bench_hnsw")
            load_s = load(dsn, "alice", args.memories) + load(dsn, "bob", args.memories)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("VACUUM ANALYZE")
            seconds, counts = asyncio.run(forget(dsn, "alice", args.batch))
            old = single_statement(dsn, "bob", Settings().db.statement_timeout_ms)
        finally:
            server.stop()
    result = {
        "memories": args.memories,
        "batch": args.batch,
        "hnsw_index": not args.no_hnsw,
        "load_seconds_two_users": round(load_s, 1),
        "forget_seconds": round(seconds, 2),
        "removed": counts,
        "single_statement_delete": old,
    }
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_forget.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
