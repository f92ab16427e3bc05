"""What the event outbox and webhooks cost the write path, and how late deliveries are.

    python -m loadtests.bench_events                      # 5 rounds of 0 vs 2 subscriptions
    python -m loadtests.bench_events --writers 4 --adds 40 --repeat 5

Store level (no Ray): an embedded PostgreSQL, the GuardedWriter adding batches of
memories (random 384-d vectors) from ``--writers`` concurrent writers, each for its own
users. Each round runs three arms back to back on the same database: ``off`` (no
subscription, the event triggers disabled by a bench-only ``ALTER TABLE ... DISABLE
TRIGGER``: what the outbox itself costs), ``zero`` (no subscription) and ``two`` (two
subscriptions, one with content, to two real receivers on 127.0.0.1 in their own
process), served by a dispatcher in another child process (as an Extractor replica
runs it, apart from the writes: on its own thread at ``MEMSERVE_WEBHOOKS_NICE``, 10 unless
the environment says otherwise) that runs throughout. The arms' order rotates from
round to round and each starts after a CHECKPOINT, so drift does not favour one arm.
Ingest throughput per arm (median of rounds; ratios two/zero and zero/off, and the
median of the rounds' paired two/zero ratios), CPU seconds per arm of the writers,
the dispatcher, the receivers and PostgreSQL (the writers' backends apart from the
rest), and the delivery lag (arrival time minus the event's occurred_at) p50/p95 over
the 2-subscription rounds. Prints a table and writes
loadtests/results/bench_events-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.procstat import process_cpu_s, snapshot
from loadtests.stats import percentile
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.services.webhooks import WebhookService
from serve_app.settings import Settings, WebhookSettings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.store.webhooks import WebhookStore
from serve_app.testing.webhook_receiver import Receiver
from serve_app.webhooks.worker import DispatcherThread

RESULTS = Path(__file__).with_name("results")
DIM = 384
SUB_SETTINGS = WebhookSettings(interval_s=0.05, allowed_networks=["127.0.0.1/32"])
ARMS = ("off", "zero", "two")
TRIGGERS = ("memory_history_events",)  # the write path's event trigger (migration 0022)


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


def receive_main(ports: Any, stop: Any, out: str, nice: int) -> None:
    """Child process: two real receivers (their CPU is the receivers', not the service's).

    In a deployment the receivers run on the platform's machines; here they share the
    box with the writers, so they run at ``nice`` (``--receiver-nice``, 19 unless told
    otherwise) to take the CPU the service leaves rather than the service's own."""
    os.nice(nice)
    receivers = [Receiver().start(), Receiver().start()]
    ports.put([r.port for r in receivers])
    stop.wait()
    for r in receivers:
        r.stop()
    got = [[(x.at, json.loads(x.body)) for x in r.received] for r in receivers]
    Path(out).write_text(json.dumps(got))


def _deliver_main(dsn: str, stop: Any) -> None:
    """Child process: a dispatcher, as an Extractor replica runs it (its own thread at
    ``MEMSERVE_WEBHOOKS_NICE``, default 10)."""

    async def serve() -> None:
        dispatcher = DispatcherThread(dsn, Settings(webhooks=SUB_SETTINGS)).start()
        try:
            while not stop.is_set():
                await asyncio.sleep(0.05)
        finally:
            await dispatcher.stop()

    asyncio.run(serve())


async def pending(pool: Any) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'pending'"
        )
        return int((await cur.fetchone())["n"])


async def triggers(pool: Any, on: bool) -> None:
    """Bench only, on its throwaway database: switch the write path's event trigger."""
    async with pool.connection() as conn:
        for name in TRIGGERS:
            verb = "ENABLE" if on else "DISABLE"
            await conn.execute(f"ALTER TABLE memory_history {verb} TRIGGER {name}")


class Cpu:
    """CPU seconds per part between :meth:`mark` calls: this process (the writers), the
    dispatcher and receiver children, the writers' PostgreSQL backends and the rest of
    PostgreSQL (the dispatcher's backends, background workers)."""

    def __init__(self, pgdata: Path, children: dict[str, int], writer_backends: set[int]):
        self.match = lambda cmd: str(pgdata) in cmd  # the postmaster of this data dir
        self.children, self.writer_backends = children, writer_backends
        self._last = self._read()

    def _read(self) -> dict[str, float]:
        pg = snapshot([], self.match)
        parts = {"writers": process_cpu_s(os.getpid())}
        parts |= {name: process_cpu_s(pid) for name, pid in self.children.items()}
        parts["pg_writers"] = sum(p.cpu_s for p in pg.values() if p.pid in self.writer_backends)
        parts["pg_other"] = sum(p.cpu_s for p in pg.values() if p.pid not in self.writer_backends)
        return parts

    def mark(self) -> dict[str, float]:
        now = self._read()
        spent = {k: round(now[k] - self._last.get(k, 0.0), 2) for k in now}
        self._last = now
        return spent


def rotated(arms: tuple[str, ...], r: int) -> tuple[str, ...]:
    """Round ``r``'s arm order: each arm goes first, middle and last equally often, so a
    drift over the run (growing tables, autovacuum, the box's other load) does not land
    on one arm."""
    k = r % len(arms)
    return arms[k:] + arms[:k]


async def checkpoint(pool: Any) -> None:
    """Flush dirty pages before an arm, so a checkpoint's writes do not fall inside a
    random arm (bench only, on its throwaway database)."""
    async with pool.connection() as conn:
        await conn.execute("CHECKPOINT")


async def backends(pool: Any) -> set[int]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        return {r["pid"] for r in await cur.fetchall()}


async def run(
    dsn: str, args: argparse.Namespace, ports: list[int], pgdata: Path, start_dispatcher: Any
) -> dict:
    pool = await open_pool(dsn, Settings(), min_size=args.writers)
    try:
        writer = GuardedWriter(pool, "bench")
        subs = WebhookService(WebhookStore(pool), SUB_SETTINGS)
        await ingest(writer, args.writers, 5, args.batch, "warm")
        mine = await backends(pool)  # before the dispatcher connects: the writers' backends
        children = start_dispatcher()
        await asyncio.sleep(2.0)
        speed: dict[str, list[float]] = {a: [] for a in ARMS}
        cpu: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
        meter = Cpu(pgdata, children, mine)
        for r in range(args.repeat):
            for arm in rotated(ARMS, r):
                await checkpoint(pool)
                made = []
                if arm == "off":
                    await triggers(pool, on=False)
                if arm == "two":
                    urls = [f"http://127.0.0.1:{port}/ok" for port in ports]
                    made = [
                        await subs.create("t", url, [], content, True)
                        for url, content in zip(urls, (True, False), strict=True)
                    ]
                meter.mark()
                speed[arm].append(
                    await ingest(writer, args.writers, args.adds, args.batch, f"{arm}{r}")
                )
                cpu[arm].append(meter.mark())
                if arm == "off":
                    await triggers(pool, on=True)
                if arm == "two":
                    await asyncio.sleep(1.0)  # the dispatcher fans this round out
                    for _ in range(6000):  # then until nothing is pending
                        if await pending(pool) == 0:
                            break
                        await asyncio.sleep(0.1)
                    cpu["two"][-1]["drain"] = meter.mark()
                    for m in made:
                        await subs.delete("t", m["id"])
    finally:
        await pool.close()
    med = {a: statistics.median(v) for a, v in speed.items()}
    paired = [round(t / z, 3) for t, z in zip(speed["two"], speed["zero"], strict=True)]
    return {
        "writers": args.writers,
        "adds_per_writer": args.adds,
        "batch": args.batch,
        "repeat": args.repeat,
        "dispatcher_interval_s": SUB_SETTINGS.interval_s,
        "dispatcher_nice": SUB_SETTINGS.nice,
        "receiver_nice": args.receiver_nice,
        "ingest_memories_per_s": {a: [round(x, 1) for x in v] for a, v in speed.items()},
        "median": {a: round(v, 1) for a, v in med.items()},
        "ratio_2_over_0": round(med["two"] / med["zero"], 3),
        "ratios_2_over_0_per_round": paired,
        "paired_ratio_2_over_0_median": round(statistics.median(paired), 3),
        "arm_order_per_round": [list(rotated(ARMS, r)) for r in range(args.repeat)],
        "trigger_ratio_0_over_off": round(med["zero"] / med["off"], 3),
        "cpu_s_per_arm": cpu,
    }


def lag_ms(received: list[list[tuple[float, dict]]]) -> dict[str, Any]:
    """Arrival minus occurred_at of each event's first delivery, over both receivers."""
    lags, counts, dupes = [], [], 0
    for got in received:
        seen: set[str] = set()
        for at, body in got:
            if body["data"]["id"] not in seen:
                seen.add(body["data"]["id"])
                lags.append(at - datetime.fromisoformat(body["timestamp"]).timestamp())
            else:
                dupes += 1
        counts.append(len(seen))

    def pick(p: float) -> float | None:
        return round(1000 * percentile(lags, p), 1) if lags else None

    return {
        "deliveries_received": counts,
        "duplicates": dupes,
        "lag_ms_p50": pick(50),
        "lag_ms_p95": pick(95),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--adds", type=int, default=40, help="add calls per writer per round")
    ap.add_argument("--batch", type=int, default=5, help="memories per add call")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--receiver-nice",
        type=int,
        default=19,
        help="receivers' nice value: they stand in for remote hosts",
    )
    ap.add_argument("--tag", default="", help="added to the result file's name")
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
            recv = ctx.Process(target=receive_main, args=(ports, stop, out, args.receiver_nice))
            recv.start()
            disp = ctx.Process(target=_deliver_main, args=(dsn, stop))

            def start_dispatcher() -> dict[str, int]:
                disp.start()
                return {"dispatcher": disp.pid, "receivers": recv.pid}

            try:
                result = asyncio.run(
                    run(dsn, args, ports.get(timeout=60), server.pgdata, start_dispatcher)
                )
            finally:
                stop.set()
                if disp.pid is not None:
                    disp.join(120)
                recv.join(120)
            result |= lag_ms(json.loads(Path(out).read_text()))
        finally:
            server.stop()
    print(json.dumps(result, indent=1))
    m = result["median"]
    print(f"{'arm':<34}{'memories/s (median)':>22}")
    print(f"{'off: no subs, event trigger off':<34}{m['off']:>22}")
    print(f"{'zero: no subscriptions':<34}{m['zero']:>22}")
    print(f"{'two: 2 subscriptions':<34}{m['two']:>22}")
    print(
        f"ratio two/zero {result['ratio_2_over_0']} (paired per round: median "
        f"{result['paired_ratio_2_over_0_median']}, "
        f"{result['ratios_2_over_0_per_round']}), trigger zero/off "
        f"{result['trigger_ratio_0_over_off']}, lag p50 {result['lag_ms_p50']} ms,"
        f" p95 {result['lag_ms_p95']} ms, received {result['deliveries_received']}"
    )
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    name = f"bench_events{'-' + args.tag if args.tag else ''}-{stamp}.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2))
    print(f"wrote loadtests/results/{name}")


if __name__ == "__main__":
    main()
