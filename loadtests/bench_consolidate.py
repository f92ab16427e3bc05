"""How long one consolidation run takes for a user with many memories.

A fresh embedded PostgreSQL gets ``--memories`` memories for one user (384-d unit
vectors: ``--groups`` groups of 5 near-duplicates, the rest random, a quarter of them
old enough to decay), then ``Consolidator.run`` is timed twice (the second run
shows the idempotent steady state), with the scripted LLM writing insights.
Prints the reports and writes ``loadtests/results/bench_consolidate-<ts>.json``.

    flock /tmp/memserve-ray.lock .venv/bin/python -m loadtests.bench_consolidate
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from loadtests.harness import write_json
from serve_app.consolidation.job import Consolidator
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.llm.client import LLMClient
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.testing.llm_server import FakeLLM

DIM, SLUG = 384, "bench"


def vectors(n: int, groups: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    for g in range(groups):  # rows 5g..5g+4: one base plus small noise (cosine ~0.97)
        base = v[5 * g]
        v[5 * g + 1 : 5 * g + 5] = base + 0.15 * rng.standard_normal((4, DIM))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def run(n: int, groups: int, dsn: str, llm_url: str) -> dict:
    settings = Settings().with_(
        llm={"base_url": llm_url, "max_retries": 0}, db={"statement_timeout_ms": 120_000}
    )
    pool = await open_pool(dsn, settings, min_size=1)
    store = GuardedWriter(pool, SLUG)
    owner = Owner("bench", "u1")
    rng = np.random.default_rng(0)
    vecs = vectors(n, groups, rng)
    started = time.perf_counter()
    for start in range(0, n, 1000):
        items = [
            NewMemory(content=f"memory {i} about topic {i % 97}", type="fact", importance=0.5)
            for i in range(start, min(n, start + 1000))
        ]
        await store.add(owner, items, vecs[start : start + len(items)])
    async with pool.connection() as conn:  # a quarter is old and never retrieved
        await conn.execute(
            "UPDATE memory_items SET created_at = now() - interval '90 days'"
            " WHERE user_id = 'u1' AND seq % 4 = 0"
        )
    load_s = time.perf_counter() - started
    llm = LLMClient(settings.llm)

    async def embed(texts, *, is_query: bool) -> np.ndarray:
        return vectors(len(texts), 0, rng)

    job = Consolidator(pool, SLUG, embed, llm, settings.consolidate)
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        report = await job.run(owner)
        runs.append({"wall_s": round(time.perf_counter() - t0, 3), **report})
        print(runs[-1])
    await llm.close()
    await pool.close()
    return {"memories": n, "duplicate_groups": groups, "load_s": round(load_s, 2), "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--groups", type=int, default=200)
    args = p.parse_args()
    fake = FakeLLM().start()
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        dsn = server.start()
        try:
            migrate(dsn)
            ensure_table(dsn, SLUG, DIM)
            result = asyncio.run(run(args.memories, args.groups, dsn, fake.url))
        finally:
            server.stop()
            fake.stop()
    print(f"wrote {write_json('bench_consolidate', result)}")


if __name__ == "__main__":
    main()
