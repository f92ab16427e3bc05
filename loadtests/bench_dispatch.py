"""CPU per webhook delivery: what the dispatcher costs the box, per event it sends.

    python -m loadtests.bench_dispatch                           # this tree
    python -m loadtests.bench_dispatch --baseline /tmp/main-tree  # before/after, one command
    python -m loadtests.bench_dispatch --profile                  # + cProfile top functions

On a 2-core box every CPU-ms the dispatcher spends is taken from ingest, so it is
measured in CPU time, not wall time (the box may be busy). An embedded PostgreSQL gets
``--events`` memories from ``--owners`` users (GuardedWriter, random vectors) for two
subscriptions (one with content) to two real receivers on 127.0.0.1 in their own
process; then a dispatcher in a fresh child process (as an Extractor replica runs it,
``interval_s`` 0.05 as bench_events) sends them all. Per delivery: the dispatcher
process's CPU (from its start until the last delivery, its own clock), PostgreSQL's CPU
(every backend: nothing else runs meanwhile) and the receivers'. With ``--baseline``
the same runs alternate between this tree's code and the baseline tree's
(``serve_app`` imported from there: e.g. ``git archive main | tar -x -C /tmp/main-tree``),
and the medians print side by side. Writes loadtests/results/bench_dispatch-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.procstat import process_cpu_s, snapshot

HERE = Path(__file__).resolve()
TREE = HERE.parents[1]
DIM = 384


def _receive_main(ports: Any, stop: Any) -> None:
    """Child process: two real receivers (their CPU is theirs, not the dispatcher's)."""
    from serve_app.testing.webhook_receiver import Receiver

    receivers = [Receiver().start(), Receiver().start()]
    ports.put([r.port for r in receivers])
    stop.wait()
    for r in receivers:
        r.stop()


async def _dispatch(dsn: str, expect: int, profile: str | None) -> dict[str, float]:
    """In the child: a dispatcher sends until ``expect`` deliveries are done."""
    from serve_app.db.pool import open_pool
    from serve_app.settings import Settings, WebhookSettings
    from serve_app.webhooks.dispatcher import Dispatcher

    s = WebhookSettings(interval_s=0.05, allowed_networks=["127.0.0.1/32"])
    pool = await open_pool(dsn, Settings(), min_size=1)
    await pool.wait()
    prof = None
    if profile:  # on this loop: the dispatcher runs here then, not on its thread
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    cpu, wall = time.process_time(), time.perf_counter()  # the whole process, every thread
    try:  # as the Extractor runs it: on its own thread where the tree has one
        if prof is not None:
            raise ImportError
        from serve_app.webhooks.worker import DispatcherThread

        dispatcher: Any = DispatcherThread(dsn, Settings(webhooks=s)).start()
    except ImportError:
        dispatcher = Dispatcher.from_settings(pool, s).start()
    try:
        deadline = time.monotonic() + 600
        while dispatcher.metrics.counts["delivered"] < expect:
            if time.monotonic() > deadline:
                raise SystemExit(f"delivered {dispatcher.metrics.counts} of {expect}")
            await asyncio.sleep(0.02)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await dispatcher.stop()
        await pool.close()
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "delivered": dispatcher.metrics.counts["delivered"],
        "failed": dispatcher.metrics.counts["failed"],
    }


def child_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--profile", default=None)
    a = ap.parse_args(argv)
    print(json.dumps(asyncio.run(_dispatch(a.dsn, a.expect, a.profile))), flush=True)


async def seed(dsn: str, owners: int, events: int, tag: str) -> None:
    """``events`` memories (one event each) from ``owners`` users, 5 a call."""
    from serve_app.db.pool import open_pool
    from serve_app.settings import Settings
    from serve_app.store import NewMemory, Owner
    from serve_app.store.guarded import GuardedWriter

    pool = await open_pool(dsn, Settings(), min_size=1)
    try:
        writer = GuardedWriter(pool, "bench")
        rng = np.random.default_rng(0)
        per_owner = events // owners
        for o in range(owners):
            owner = Owner("t", f"{tag}-u{o}")
            for i in range(0, per_owner, 5):
                n = min(5, per_owner - i)
                items = [NewMemory(f"{tag} owner {o} memory {i + k}") for k in range(n)]
                await writer.add(owner, items, rng.standard_normal((n, DIM), dtype=np.float32))
    finally:
        await pool.close()


async def subscriptions(dsn: str, ports: list[int], make: bool) -> None:
    """Two subscriptions (one with content) made fresh, or every one dropped."""
    from serve_app.db.pool import open_pool
    from serve_app.services.webhooks import WebhookService
    from serve_app.settings import Settings, WebhookSettings
    from serve_app.store.webhooks import WebhookStore

    pool = await open_pool(dsn, Settings(), min_size=1)
    try:
        svc = WebhookService(WebhookStore(pool), WebhookSettings(allowed_networks=["127.0.0.1/32"]))
        if make:
            for port, content in zip(ports, (True, False), strict=True):
                await svc.create("t", f"http://127.0.0.1:{port}/ok", [], content, True)
        else:
            for sub in await svc.list("t"):
                await svc.delete("t", sub["id"])
    finally:
        await pool.close()


def measure(
    code: Path, dsn: str, pgdata: Path, recv_pid: int, expect: int, profile: str | None
) -> dict[str, float]:
    """One dispatcher child over ``code``'s serve_app; CPU per delivery per part."""
    match = lambda cmd: str(pgdata) in cmd  # noqa: E731 (the postmaster of this data dir)
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{TREE}"}
    cmd = [sys.executable, str(HERE), "--child", "--dsn", dsn, "--expect", str(expect)]
    if profile:
        cmd += ["--profile", profile]
    pg0 = sum(p.cpu_s for p in snapshot([], match).values())
    rc0 = process_cpu_s(recv_pid)
    out = subprocess.run(cmd, env=env, cwd=code, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"dispatcher child failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    pg = sum(p.cpu_s for p in snapshot([], match).values()) - pg0
    n = got["delivered"]
    return {
        "deliveries": n,
        "wall_s": round(got["wall_s"], 2),
        "dispatcher_cpu_ms": round(1000 * got["cpu_s"] / n, 3),
        "postgres_cpu_ms": round(1000 * pg / n, 3),
        "receivers_cpu_ms": round(1000 * (process_cpu_s(recv_pid) - rc0) / n, 3),
        "failed_sends": got["failed"],
    }


def top(profile: str, n: int = 25) -> None:
    import pstats

    pstats.Stats(profile).sort_stats("tottime").print_stats(n)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=800, help="memories (events) a run")
    ap.add_argument("--owners", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="a tree to compare with")
    ap.add_argument("--profile", action="store_true", help="cProfile this tree's last run")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    from serve_app.db.embedded import EmbeddedPostgres
    from serve_app.db.migrations import migrate
    from serve_app.store.vectors import ensure_table

    trees = {"after": TREE} | ({"before": args.baseline.resolve()} if args.baseline else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="memserve-bench-dispatch-") as tmp:
        server = EmbeddedPostgres(Path(tmp))
        dsn = server.start()
        ctx = multiprocessing.get_context("spawn")
        ports, stop = ctx.Queue(), ctx.Event()
        recv = ctx.Process(target=_receive_main, args=(ports, stop))
        try:
            migrate(dsn)
            ensure_table(dsn, "bench", DIM)
            recv.start()
            port_list = ports.get(timeout=60)
            for r in range(args.repeat):
                for name, code in reversed(trees.items()) if r % 2 else trees.items():
                    asyncio.run(subscriptions(dsn, port_list, make=True))
                    asyncio.run(seed(dsn, args.owners, args.events, f"{name}{r}"))
                    last = args.profile and name == "after" and r == args.repeat - 1
                    prof = str(Path(tmp) / "dispatch.prof") if last else None
                    runs[name].append(
                        measure(code, dsn, server.pgdata, recv.pid, 2 * args.events, prof)
                    )
                    print(name, runs[name][-1], flush=True)
                    if prof:
                        top(prof)
                    asyncio.run(subscriptions(dsn, port_list, make=False))
        finally:
            stop.set()
            if recv.pid is not None:
                recv.join(60)
            server.stop()
    keys = ("dispatcher_cpu_ms", "postgres_cpu_ms", "receivers_cpu_ms", "wall_s")
    med = {
        name: {k: round(statistics.median(x[k] for x in rs), 3) for k in keys}
        for name, rs in runs.items()
    }
    result = {
        "events": args.events,
        "owners": args.owners,
        "subscriptions": 2,
        "repeat": args.repeat,
        "trees": {k: str(v) for k, v in trees.items()},
        "runs": runs,
        "median": med,
    }
    print(f"{'CPU ms per delivery (median)':<30}" + "".join(f"{n:>12}" for n in med))
    for k in keys:
        print(f"{k:<30}" + "".join(f"{m[k]:>12}" for m in med.values()))
    from loadtests.harness import write_json

    print(f"wrote {write_json('bench_dispatch' + ('-' + args.tag if args.tag else ''), result)}")


if __name__ == "__main__":
    main()
