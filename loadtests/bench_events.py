"""What the event outbox and webhooks cost the write path, and how late deliveries are.

    python -m loadtests.bench_events                      # 3 rounds of 0 vs 2 subscriptions
    python -m loadtests.bench_events --writers 4 --adds 150 --repeat 3

Store level (no Ray): an embedded PostgreSQL, the GuardedWriter adding batches of
memories (random 384-d vectors) from ``--writers`` concurrent writers, each for its own
users. Rounds alternate: no subscription, then two subscriptions (one with content)
to two real receivers on 127.0.0.1, served by a dispatcher running meanwhile in the
same process (pessimistic: in production it runs in the Extractor replicas, not beside
the writes). Ingest throughput per phase (median of rounds, ratio 2-subs/0-subs) and
the delivery lag (arrival time minus the event's occurred_at) p50/p95 over the
2-subscription rounds. Prints a table and writes loadtests/results/bench_events.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

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


async def run(dsn: str, args: argparse.Namespace) -> dict:
    settings = Settings()
    pool = await open_pool(dsn, settings, min_size=2)
    receivers = [Receiver().start(), Receiver().start()]
    s = WebhookSettings(interval_s=0.05, allowed_networks=["127.0.0.1/32"])
    try:
        writer = GuardedWriter(pool, "bench")
        await ingest(writer, args.writers, 5, args.batch, "warm")
        zero, two = [], []
        subs = WebhookService(WebhookStore(pool), s)
        for r in range(args.repeat):
            zero.append(await ingest(writer, args.writers, args.adds, args.batch, f"z{r}"))
            made = [await subs.create("t", rc.url("/ok"), [], content, True)
                    for rc, content in zip(receivers, (True, False), strict=True)]  # fmt: skip
            dispatcher = Dispatcher.from_settings(pool, s).start()
            try:
                two.append(await ingest(writer, args.writers, args.adds, args.batch, f"w{r}"))
                want = args.writers * args.adds * args.batch
                for _ in range(6000):  # until both receivers have this round's events
                    if all(len(rc.received) >= want * (r + 1) for rc in receivers):
                        break
                    await asyncio.sleep(0.05)
            finally:
                await dispatcher.stop()
            for m in made:
                await subs.delete("t", m["id"])
        lags = []
        for rc in receivers:
            seen = set()
            for got in rc.received:
                body = json.loads(got.body)
                if body["data"]["id"] in seen:
                    continue
                seen.add(body["data"]["id"])
                lags.append(got.at - datetime.fromisoformat(body["timestamp"]).timestamp())
        delivered = [len(rc.received) for rc in receivers]
    finally:
        for rc in receivers:
            rc.stop()
        await pool.close()
    lags.sort()
    z, w = statistics.median(zero), statistics.median(two)
    return {
        "writers": args.writers, "adds_per_writer": args.adds, "batch": args.batch,
        "repeat": args.repeat,
        "ingest_memories_per_s_0_subs": [round(x, 1) for x in zero],
        "ingest_memories_per_s_2_subs": [round(x, 1) for x in two],
        "median_0_subs": round(z, 1), "median_2_subs": round(w, 1),
        "ratio_2_over_0": round(w / z, 3),
        "deliveries_received": delivered,
        "lag_ms_p50": round(1000 * lags[len(lags) // 2], 1) if lags else None,
        "lag_ms_p95": round(1000 * lags[int(len(lags) * 0.95)], 1) if lags else None,
    }  # fmt: skip


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
            result = asyncio.run(run(dsn, args))
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
