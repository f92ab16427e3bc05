"""Extraction benchmark: turn ingest stays fast while the LLM is slow.

Starts the real service (``python -m serve_app run``, as the e2e tests do) with
the scripted LLM from ``serve_app/testing/llm_server.py`` answering every call after a
fixed delay (default 2 s), then measures over HTTP:

1. ``POST /v1/sessions/{sid}/turns`` latency (p50/p95/p99) under ``--concurrency``
   clients, one user turn per call; every ``MEMSERVE_EXTRACT_EVERY_N_TURNS``-th
   (4) user turn of a session fires an extraction, so LLM calls are in flight
   the whole time and must not show up in ingest latency.
2. End to end: after the N-th turn of a fresh session, the time until the
   extracted memory is returned by ``POST /v1/search`` (LLM delay + embedding
   + writes + polling granularity of 50 ms).

Prints a table and writes ``loadtests/results/bench_extract.json``.

    python loadtests/bench_extract.py                  # 400 turn calls, LLM delay 2 s
    python loadtests/bench_extract.py --turns 1000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadtests.stats import percentile  # noqa: E402
from serve_app.testing.llm_server import FakeLLM, extraction, memory  # noqa: E402
from serve_app.testing.service import ServiceProcess  # noqa: E402

EVERY_N = 4


async def ingest(client: httpx.AsyncClient, n: int, concurrency: int) -> list[float]:
    """n turn calls; users/sessions rotate so extractions keep firing everywhere."""
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            user, session = f"bu{i % 50}", f"bs{(i // 200)}"
            body = {"user_id": user, "messages": [{"role": "user", "content": f"turn {i} note"}]}
            t0 = time.perf_counter()
            r = await client.post(f"/v1/sessions/{session}/turns", json=body)
            latencies.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 202, r.text

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def baseline(client: httpx.AsyncClient, n: int, concurrency: int) -> list[float]:
    """GET /healthz at the same concurrency: the HTTP + Serve floor on this machine now."""
    latencies: list[float] = []

    async def worker(k: int) -> None:
        for _ in range(k):
            t0 = time.perf_counter()
            await client.get("/healthz")
            latencies.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
    return latencies


async def end_to_end(client: httpx.AsyncClient, fake: FakeLLM, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        uid = f"e2e{i}_{secrets.token_hex(3)}"
        marker = f"kayak-{uid}"
        fake.add_rule(marker, extraction([memory(f"The user owns a red {marker}")]))
        for j in range(EVERY_N - 1):
            body = {"user_id": uid, "messages": [{"role": "user", "content": f"filler {j}"}]}
            await client.post("/v1/sessions/s/turns", json=body)
        body = {"user_id": uid, "messages": [{"role": "user", "content": f"I own a red {marker}"}]}
        t0 = time.perf_counter()
        r = await client.post("/v1/sessions/s/turns", json=body)
        assert r.json()["extraction"] == "scheduled", r.text
        while True:
            r = await client.post("/v1/search", json={"user_id": uid, "query": "what boat?"})
            results = r.json().get("results", [])
            if any(marker in m["content"] for m in results):
                break
            if time.perf_counter() - t0 > 60:
                raise RuntimeError("extracted memory never became searchable")
            await asyncio.sleep(0.05)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def measure(svc: ServiceProcess, fake: FakeLLM, args) -> dict:
    headers = {"Authorization": f"Bearer {svc.bootstrap_key}"}
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(
        base_url=svc.base_url, headers=headers, timeout=30, limits=limits
    ) as client:
        await ingest(client, 40, args.concurrency)  # warm-up
        await asyncio.sleep(args.llm_delay * 4)  # let the warm-up's extractions finish
        e2e = await end_to_end(client, fake, args.e2e_runs)  # an idle extractor
        floor = await baseline(client, args.turns, args.concurrency)
        calls_before = len(fake.calls("extract"))
        lat = await ingest(client, args.turns, args.concurrency)
        llm_calls = len(fake.calls("extract")) - calls_before
    return {
        "healthz_ms": {"p50": percentile(floor, 50), "p95": percentile(floor, 95)},
        "turn_ingest_ms": {
            "n": len(lat),
            "p50": percentile(lat, 50),
            "p95": percentile(lat, 95),
            "p99": percentile(lat, 99),
            "max": max(lat),
        },
        "llm_calls_during_ingest": llm_calls,
        "end_to_end_searchable_ms": {
            "n": len(e2e),
            "p50": percentile(e2e, 50),
            "p95": percentile(e2e, 95),
            "min": min(e2e),
            "max": max(e2e),
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=400)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--llm-delay", type=float, default=2.0)
    p.add_argument("--e2e-runs", type=int, default=5)
    p.add_argument("--out", type=Path, default=REPO / "loadtests/results/bench_extract.json")
    args = p.parse_args()

    fake = FakeLLM().start()
    fake.set_mode("delay", delay_s=args.llm_delay)
    data_dir = Path(tempfile.mkdtemp(prefix="memserve-bench-extract-"))
    env = {
        "MEMSERVE_LLM_BASE_URL": fake.url,
        "MEMSERVE_LLM_MODEL": "fake",
        "MEMSERVE_EXTRACT_EVERY_N_TURNS": str(EVERY_N),
        "MEMSERVE_RAY_NUM_CPUS": "4",
    }
    svc = ServiceProcess(data_dir, "msk_bench_" + secrets.token_hex(8), extra_env=env)
    print(f"starting the service in {data_dir} ...", flush=True)
    svc.start()
    try:
        result = asyncio.run(measure(svc, fake, args))
    finally:
        svc.stop()
        fake.stop()
    result.update(
        {
            "llm_delay_s": args.llm_delay,
            "concurrency": args.concurrency,
            "every_n_turns": EVERY_N,
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "at": datetime.now(UTC).isoformat(),
        }
    )
    t, e = result["turn_ingest_ms"], result["end_to_end_searchable_ms"]
    print(f"\nLLM answers after {args.llm_delay:.1f} s; {args.concurrency} concurrent clients")
    print(f"{'measure':<34}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'p99/max':>10}")
    print(
        f"{'POST /v1/sessions/{sid}/turns':<34}{t['n']:>6}{t['p50']:>10.1f}{t['p95']:>10.1f}"
        f"{t['p99']:>10.1f}"
    )
    print(
        f"{'turn -> memory searchable':<34}{e['n']:>6}{e['p50']:>10.0f}{e['p95']:>10.0f}"
        f"{e['max']:>10.0f}"
    )
    f = result["healthz_ms"]
    print(f"{'GET /healthz (floor, same load)':<34}{'':>6}{f['p50']:>10.1f}{f['p95']:>10.1f}")
    print(f"LLM extraction calls during the ingest phase: {result['llm_calls_during_ingest']}")
    print(f"load average at the end: {os.getloadavg()}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
