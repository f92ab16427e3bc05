"""What the event outbox and webhooks cost the write path, and how late deliveries are.

    python -m loadtests.bench_events                      # 3 rounds of 0 vs 2 subscriptions
    python -m loadtests.bench_events --writers 4 --adds 150 --repeat 3

Store level (no Ray): an embedded PostgreSQL, the GuardedWriter adding batches of
memories (random 384-d vectors) from ``--writers`` concurrent writers, each for its own
users. Rounds alternate: no subscription, then two subscriptions (one with content)
to two real receivers on 127.0.0.1, served by a dispatcher in a child process (as an
Extractor replica runs it, apart from the writes) that runs throughout. Ingest
throughput per phase (median of rounds, ratio 2-subs/0-subs) and the delivery lag
(arrival time minus the event's occurred_at) p50/p95 over the 2-subscription rounds.
Prints a table and writes loadtests/results/bench_events.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.services.webhooks import WebhookService
from serve_app.settings import Settings, WebhookSettings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.store.webhooks import WebhookStore
from serve_app.webhooks.dispatcher import Dispatcher
from tests.fakes.webhook_receiver import Receiver

RESULTS = Path(__file__).with_name("results")
DIM = 384
SUB_SETTINGS = WebhookSettings(interval_s=0.05, allowed_networks=["127.0.0.1/32"])


async def ingest(writer: GuardedWriter, writers: int, adds: int, batch: int, tag: str) -> float:
    """Memories per second written by ``writers`` concurrent writers."""
    rng = np.random.default_rng(0)

    async def one(w: int) -> None:
        owner = Owner("t", f"{tag}-u{w}")
        for i in range(adds):
            items = [NewMemory(f"{tag} writer {w} add {i} item {k}") for k in range(batch)]
            await writer.add(owner, items, rng.standard_normal((batch, DIM), dtype=np.float32))

    t = time.perf_counter()
    await asyncio.gather(*(one(w) for w in range(writers)))
    return writers * adds * batch / (time.perf_counter() - t)


def _deliver_main(dsn: str, ports: Any, stop: Any, out: str) -> None:
    """Child process: two receivers and a dispatcher (as an Extractor replica runs it)."""
    receivers = [Receiver().start(), Receiver().start()]
    ports.put([r.port for r in receivers])

    async def serve() -> None:
        pool = await open_pool(dsn, Settings(), min_size=1)
        dispatcher = Dispatcher.from_settings(pool, SUB_SETTINGS).start()
        try:
            while not stop.is_set():
                await asyncio.sleep(0.05)
        finally:
            await dispatcher.stop()
            await pool.close()

    try:
        asyncio.run(serve())
    finally:
        for r in receivers:
            r.stop()
    got = [[(x.at, json.loads(x.body)) for x in r.received] for r in receivers]
    Path(out).write_text(json.dumps(got))


async def pending(pool: Any) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending'"
        )
        return int((await cur.fetchone())["n"])


async def run(dsn: str, args: argparse.Namespace, ports: list[int]) -> dict:
    pool = await open_pool(dsn, Settings(), min_size=2)
    try:
        writer = GuardedWriter(pool, "bench")
        subs = WebhookService(WebhookStore(pool), SUB_SETTINGS)
        await ingest(writer, args.writers, 5, args.batch, "warm")
        zero, two = [], []
        for r in range(args.repeat):
            zero.append(await ingest(writer, args.writers, args.adds, args.batch, f"z{r}"))
            made = [await subs.create("t", f"http://127.0.0.1:{port}/ok", [], content, True)
                    for port, content in zip(ports, (True, False), strict=True)]  # fmt: skip
            two.append(await ingest(writer, args.writers, args.adds, args.batch, f"w{r}"))
            await asyncio.sleep(1.0)  # the dispatcher fans this round out
            for _ in range(6000):  # then until nothing is pending
                if await pending(pool) == 0:
                    break
                await asyncio.sleep(0.1)
            for m in made:
                await subs.delete("t", m["id"])
    finally:
        await pool.close()
    z, w = statistics.median(zero), statistics.median(two)
    return {
        "writers": args.writers, "adds_per_writer": args.adds, "batch": args.batch,
        "repeat": args.repeat,
        "ingest_memories_per_s_0_subs": [round(x, 1) for x in zero],
        "ingest_memories_per_s_2_subs": [round(x, 1) for x in two],
        "median_0_subs": round(z, 1), "median_2_subs": round(w, 1),
        "ratio_2_over_0": round(w / z, 3),
    }  # fmt: skip


def lag_ms(received: list[list[tuple[float, dict]]]) -> dict[str, Any]:
    """Arrival minus occurred_at of each event's first delivery, over both receivers."""
    lags, counts = [], []
    for got in received:
        seen: set[str] = set()
        for at, body in got:
            if body["data"]["id"] not in seen:
                seen.add(body["data"]["id"])
                lags.append(at - datetime.fromisoformat(body["timestamp"]).timestamp())
        counts.append(len(seen))
    lags.sort()

    def pick(q: float) -> float | None:
        return round(1000 * lags[min(int(len(lags) * q), len(lags) - 1)], 1) if lags else None

    return {"deliveries_received": counts, "lag_ms_p50": pick(0.5), "lag_ms_p95": pick(0.95)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--adds", type=int, default=100, help="add calls per writer per round")
    ap.add_argument("--batch", type=int, default=5, help="memories per add call")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memserve-bench-events-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        try:
            migrate(dsn)
            ensure_table(dsn, "bench", DIM)
            ctx = multiprocessing.get_context("spawn")
            ports, stop = ctx.Queue(), ctx.Event()
            out = str(Path(tmp) / "received.json")
            child = ctx.Process(target=_deliver_main, args=(dsn, ports, stop, out))
            child.start()
            try:
                result = asyncio.run(run(dsn, args, ports.get(timeout=60)))
            finally:
                stop.set()
                child.join(120)
            result |= lag_ms(json.loads(Path(out).read_text()))
        finally:
            server.stop()
    print(json.dumps(result, indent=2))
    print(f"{'phase':<16}{'memories/s (median)':>22}")
    print(f"{'0 subscriptions':<16}{result['median_0_subs']:>22}")
    print(f"{'2 subscriptions':<16}{result['median_2_subs']:>22}")
    print(f"ratio {result['ratio_2_over_0']}, lag p50 {result['lag_ms_p50']} ms,"
          f" p95 {result['lag_ms_p95']} ms")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_events.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
