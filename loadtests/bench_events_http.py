"""Ingest throughput of the real service with 0 and with 2 webhook subscriptions (issue 32).

    python -m loadtests.bench_events_http                  # 6 rounds of 15 s per arm
    python -m loadtests.bench_events_http --rounds 4 --seconds 20 --concurrency 8

bench_events.py measures the store alone (the GuardedWriter at full speed, nothing else
per write), the harshest case for the outbox. This one measures what a platform sees:
one fresh service (Ray Serve over HTTP, ``python -m serve_app run``, the dispatcher on
its niced thread in the Extractor as deployed), ``--concurrency`` closed-loop clients
adding memories (``POST /v1/memories``: one embedding and one insert each, each event
``memory.added``) for ``--seconds`` per arm. Arms ``zero`` (no subscription) and ``two``
(two subscriptions through ``/v1/admin/webhooks``, one with content, to two real
receivers on 127.0.0.1 in a child process at nice 19: they stand in for the platform's
own machines) alternate, the order swapping every round; after a ``two`` arm the
deliveries drain (``pending`` 0 in the admin list) and the subscriptions are deleted.
Reported: writes/s per arm (median of rounds), the median of the rounds' paired
two/zero ratios (the target: >= 0.90), write p50/p95 per arm, and the delivery lag
(arrival minus the event's occurred_at) p50/p95 over the ``two`` arms, with the
dispatcher's round interval as configured (``MEMSERVE_WEBHOOKS_INTERVAL_S``). Prints a
table and writes loadtests/results/bench_events_http-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.bench_events import lag_ms, receive_main
from loadtests.harness import fresh_service, write_json
from loadtests.stats import percentile
from loadtests.synthetic import memory


async def arm(client: httpx.AsyncClient, concurrency: int, seconds: float, tag: str) -> dict:
    """Closed-loop adds for ``seconds``: writes/s and latency of the successful ones."""
    lat: list[float] = []
    failed = 0
    end = time.perf_counter() + seconds

    async def one(c: int) -> None:
        nonlocal failed
        rng, n = random.Random(f"{tag}{c}"), 0
        while time.perf_counter() < end:
            body = {"user_id": f"{tag}-u{c}-{n % 4}", "content": memory(rng)}
            t = time.perf_counter()
            r = await client.post("/v1/memories", json=body)
            if r.status_code == 201:
                lat.append((time.perf_counter() - t) * 1000)
            else:
                failed += 1
            n += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(concurrency)))
    took = time.perf_counter() - t0
    return {
        "writes_per_s": round(len(lat) / took, 2),
        "writes": len(lat),
        "failed": failed,
        "p50_ms": round(percentile(lat, 50), 1),
        "p95_ms": round(percentile(lat, 95), 1),
    }


async def drain(admin: httpx.AsyncClient, timeout_s: float = 600.0) -> float:
    """Seconds until no subscription has a pending delivery."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        subs = (await admin.get("/v1/admin/webhooks")).raise_for_status().json()["webhooks"]
        if all(s["pending"] == 0 for s in subs):
            return time.perf_counter() - t0
        await asyncio.sleep(0.5)
    raise SystemExit(f"deliveries still pending after {timeout_s} s")


async def bench(
    base_url: str, admin_key: str, writer_key: str, ports: list[int], args: argparse.Namespace
) -> dict:
    headers = {"Authorization": f"Bearer {writer_key}"}
    limits = httpx.Limits(max_connections=args.concurrency + 4)
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=120, headers=headers, limits=limits) as wc,
        httpx.AsyncClient(
            base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {admin_key}"}
        ) as ac,
    ):
        await arm(wc, args.concurrency, args.warm_s, "warm")
        arms: dict[str, list[dict]] = {"zero": [], "two": []}
        drains: list[float] = []
        for r in range(args.rounds):
            for name in ("zero", "two") if r % 2 == 0 else ("two", "zero"):
                made = []
                if name == "two":
                    for port, content in zip(ports, (True, False), strict=True):
                        body = {"url": f"http://127.0.0.1:{port}/ok", "include_content": content}
                        got = await ac.post("/v1/admin/webhooks", json=body)
                        made.append(got.raise_for_status().json()["id"])
                arms[name].append(await arm(wc, args.concurrency, args.seconds, f"{name}{r}"))
                if name == "two":
                    drains.append(round(await drain(ac), 1))
                    for sub in made:
                        (await ac.delete(f"/v1/admin/webhooks/{sub}")).raise_for_status()
                print(f"round {r} {name}: {arms[name][-1]}", flush=True)
    speed = {a: [x["writes_per_s"] for x in v] for a, v in arms.items()}
    paired = [round(t / z, 3) for t, z in zip(speed["two"], speed["zero"], strict=True)]
    return {
        "concurrency": args.concurrency,
        "seconds_per_arm": args.seconds,
        "rounds": args.rounds,
        "arms": arms,
        "drain_s_after_two": drains,
        "median_writes_per_s": {a: statistics.median(v) for a, v in speed.items()},
        "paired_ratio_2_over_0": paired,
        "paired_ratio_2_over_0_median": round(statistics.median(paired), 3),
        "p50_ms": {a: statistics.median(x["p50_ms"] for x in v) for a, v in arms.items()},
        "p95_ms": {a: statistics.median(x["p95_ms"] for x in v) for a, v in arms.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=15.0, help="per arm")
    ap.add_argument("--warm-s", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--receiver-nice", type=int, default=19)
    args = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="memserve-bench-events-http-") as tmp:
        ports_q, stop = ctx.Queue(), ctx.Event()
        out = str(Path(tmp) / "received.json")
        recv = ctx.Process(target=receive_main, args=(ports_q, stop, out, args.receiver_nice))
        recv.start()
        try:
            ports = ports_q.get(timeout=60)
            env = {"MEMSERVE_WEBHOOKS_ALLOWED_NETWORKS": '["127.0.0.1/32"]'}
            with fresh_service(Path(tmp) / "svc", **env) as svc:
                writer_key = svc.add_key("msk_" + secrets.token_hex(16), "default", "service")
                result: dict[str, Any] = asyncio.run(
                    bench(svc.base_url, svc.admin_key, writer_key, ports, args)
                )
        finally:
            stop.set()
            recv.join(120)
        result |= lag_ms(json.loads(Path(out).read_text()))
    m = result["median_writes_per_s"]
    print(
        f"\nwrites/s (median of {args.rounds} rounds, {args.concurrency} clients):"
        f" zero {m['zero']}, two {m['two']}; paired two/zero median"
        f" {result['paired_ratio_2_over_0_median']} {result['paired_ratio_2_over_0']}"
    )
    print(
        f"write p50 zero/two {result['p50_ms']['zero']}/{result['p50_ms']['two']} ms,"
        f" p95 {result['p95_ms']['zero']}/{result['p95_ms']['two']} ms; delivery lag p50"
        f" {result['lag_ms_p50']} ms, p95 {result['lag_ms_p95']} ms;"
        f" received {result['deliveries_received']}, duplicates {result['duplicates']}"
    )
    print(f"wrote {write_json('bench_events_http', result)}")


if __name__ == "__main__":
    main()
