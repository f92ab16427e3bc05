"""What the event outbox's indexes cost a write: PostgreSQL CPU per memory added.

    python -m loadtests.bench_event_indexes                # 3 rounds, 1500 memories an arm
    python -m loadtests.bench_event_indexes --adds 300 --repeat 5

Store level, two measures, CPU not wall time (the box may be busy):

1. The write path: an embedded PostgreSQL and one GuardedWriter adding ``--adds`` calls
   of 5 memories (random 384-d vectors) on a pool of one connection, whose backend's
   CPU (/proc) is measured. Arms, alternated each round on the same database: ``off``
   (the write path's event trigger disabled: no outbox at all), ``v22`` (memory_events
   with migration 0022's five btree indexes) and ``narrow`` (the history_id index
   dropped, occurred_at as BRIN: what a narrowing migration would leave).
2. Per index: trigger-sized INSERTs (200 rows a statement, 20 000 rows) into a scratch
   copy of memory_events with no index, all five, and all but one; backend CPU per row.

Prints medians and writes loadtests/results/bench_event_indexes-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
from psycopg import AsyncConnection

from loadtests.harness import write_json
from loadtests.procstat import process_cpu_s
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table

DIM = 384
V22 = [  # what the narrow arm changes, as migration 0022 made it
    "DROP INDEX IF EXISTS memory_events_age_brin",
    "CREATE INDEX IF NOT EXISTS memory_events_history_idx ON memory_events (history_id)"
    " WHERE history_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS memory_events_age_idx ON memory_events (occurred_at)",
]
NARROW = [
    "DROP INDEX IF EXISTS memory_events_history_idx",
    "DROP INDEX IF EXISTS memory_events_age_idx",
    "CREATE INDEX IF NOT EXISTS memory_events_age_brin ON memory_events USING brin (occurred_at)",
]
TRIGGER = "ALTER TABLE memory_history {} TRIGGER memory_history_events"


async def arm(pool, writer: GuardedWriter, name: str, adds: int, tag: str) -> float:
    """Backend CPU microseconds per memory for ``adds`` calls of 5 in arm ``name``."""
    async with pool.connection() as conn:
        for ddl in NARROW if name == "narrow" else V22:
            await conn.execute(ddl)
        await conn.execute(TRIGGER.format("DISABLE" if name == "off" else "ENABLE"))
        await conn.execute("CHECKPOINT")  # the arms start alike: no dirty backlog
        pid = (await (await conn.execute("SELECT pg_backend_pid() AS p")).fetchone())["p"]
    rng = np.random.default_rng(0)
    owner = Owner("t", f"{tag}-u")
    before = process_cpu_s(pid)
    for i in range(adds):
        items = [NewMemory(f"{tag} add {i} item {k}") for k in range(5)]
        await writer.add(owner, items, rng.standard_normal((5, DIM), dtype=np.float32))
    return 1e6 * (process_cpu_s(pid) - before) / (5 * adds)


async def run(dsn: str, args: argparse.Namespace) -> dict:
    s = Settings()  # a pool of one: every statement on the one measured backend
    s = s.model_copy(update={"db": s.db.model_copy(update={"pool_max": 1})})
    pool = await open_pool(dsn, s, min_size=1)
    try:
        writer = GuardedWriter(pool, "bench")
        await arm(pool, writer, "v22", 40, "warm")
        got: dict[str, list[float]] = {"off": [], "v22": [], "narrow": []}
        for r in range(args.repeat):
            order = list(got) if r % 2 == 0 else list(reversed(got))
            for name in order:
                got[name].append(round(await arm(pool, writer, name, args.adds, f"{name}{r}"), 1))
                print(name, got[name][-1], "us CPU/memory", flush=True)
    finally:
        await pool.close()
    med = {k: round(statistics.median(v), 1) for k, v in got.items()}
    return {
        "adds": args.adds,
        "memories_per_add": 5,
        "repeat": args.repeat,
        "backend_cpu_us_per_memory": got,
        "median": med,
        "outbox_us": round(med["v22"] - med["off"], 1),
        "saved_by_narrowing_us": round(med["v22"] - med["narrow"], 1),
        "per_index_us_per_row": await per_index(dsn, args.repeat),
    }


INDEXES = {
    "feed": "(tenant_id, txid, id)",
    "user": "(tenant_id, user_id, txid, id)",
    "memory": "(tenant_id, memory_id) WHERE memory_id IS NOT NULL",
    "history": "(history_id) WHERE history_id IS NOT NULL",
    "age": "(occurred_at)",
}
ROWS = (
    "INSERT INTO ev (tenant_id, type, user_id, memory_id, version, history_id, actor,"
    " content) SELECT 't', 'memory.added', 'u' || (g %% 50), gen_random_uuid(), 1, g,"
    " 'bench', 'some memory content ' || g"
    " FROM generate_series(%s::int, %s::int) g"
)


async def per_index(dsn: str, repeat: int, rows: int = 20000) -> dict[str, float]:
    """Backend CPU microseconds per event row with no index, all five, all but one."""
    sets = {"none": [], "all": list(INDEXES)}
    sets |= {f"all-{name}": [i for i in INDEXES if i != name] for name in INDEXES}
    got: dict[str, list[float]] = {k: [] for k in sets}
    async with await AsyncConnection.connect(dsn, autocommit=True) as conn:
        pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
        for _ in range(repeat):
            for name, idx in sets.items():
                await conn.execute("DROP TABLE IF EXISTS ev")
                await conn.execute("CREATE TABLE ev (LIKE memory_events INCLUDING DEFAULTS)")
                await conn.execute("ALTER TABLE ev ADD PRIMARY KEY (id)")
                for i in idx:
                    await conn.execute(f"CREATE INDEX ON ev {INDEXES[i]}")
                before = process_cpu_s(pid)
                for k in range(0, rows, 200):
                    await conn.execute(ROWS, (k + 1, k + 200))
                got[name].append(1e6 * (process_cpu_s(pid) - before) / rows)
        await conn.execute("DROP TABLE IF EXISTS ev")
    return {k: round(statistics.median(v), 1) for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--adds", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memserve-bench-evidx-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            migrate(dsn)
            ensure_table(dsn, "bench", DIM)
            result = asyncio.run(run(dsn, args))
        finally:
            server.stop()
    print(
        json.dumps(result["median"]),
        "outbox",
        result["outbox_us"],
        "us/memory;",
        "narrowing saves",
        result["saved_by_narrowing_us"],
        "us/memory",
    )
    print("per event row, us CPU:", json.dumps(result["per_index_us_per_row"]))
    print(f"wrote {write_json('bench_event_indexes', result)}")


if __name__ == "__main__":
    main()
