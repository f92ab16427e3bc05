"""A valid user's search latency while strangers flood the service with random API keys.

    python -m loadtests.bench_bad_keys                    # starts its own service
    python -m loadtests.bench_bad_keys --host http://127.0.0.1:8000 --key $KEY

Idle: the valid user's searches alone. Flood: the same searches while 2,000 requests
with random keys arrive from 32 concurrent connections. Unknown keys are answered from
a negative cache or refused per client address before any database lookup, so the
flood must not exhaust the connection pools; the goal is p95 within 3x of idle.
Prints the figures and writes loadtests/results/bench_bad_keys-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import time
from collections import Counter

import httpx

from loadtests.bench_search_http import load
from loadtests.harness import fresh_service, write_json
from loadtests.stats import percentile
from loadtests.synthetic import question


async def valid_searches(
    client: httpx.AsyncClient, user: str, rng: random.Random, n: int, until: asyncio.Event | None
) -> tuple[list[float], Counter[int]]:
    """Sequential searches: at least ``n``, and until ``until`` is set (the flood is over)."""
    latencies: list[float] = []
    codes: Counter[int] = Counter()
    while len(latencies) < n or (until is not None and not until.is_set()):
        t = time.perf_counter()
        r = await client.post(
            "/v1/search", json={"user_id": user, "query": question(rng), "top_k": 10}
        )
        codes[r.status_code] += 1
        if r.status_code == 200:
            latencies.append((time.perf_counter() - t) * 1000)
    return latencies, codes


async def flood(host: str, total: int, concurrency: int) -> tuple[Counter[int], float]:
    codes: Counter[int] = Counter()
    left = list(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(client: httpx.AsyncClient) -> None:
        while left:
            left.pop()
            headers = {"Authorization": "Bearer msk_" + secrets.token_urlsafe(32)}
            try:
                r = await client.post(
                    "/v1/search", json={"user_id": "x", "query": "q"}, headers=headers
                )
                codes[r.status_code] += 1
            except httpx.HTTPError as exc:
                codes[type(exc).__name__] += 1  # type: ignore[index]

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=host, timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return codes, time.perf_counter() - started


def summary(latencies: list[float]) -> dict:
    return {
        "n": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
    }


async def run(host: str, key: str, bad: int, concurrency: int, searches: int) -> dict:
    rng = random.Random(11)
    user = "bench_badkeys_" + secrets.token_hex(3)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=host, headers=headers, timeout=60) as client:
        await load(client, user, 300, rng)
        await valid_searches(client, user, rng, 30, None)  # warm: key cached, user hot
        idle, idle_codes = await valid_searches(client, user, rng, searches, None)
        done = asyncio.Event()

        async def flood_then_stop() -> tuple[Counter[int], float]:
            try:
                return await flood(host, bad, concurrency)
            finally:
                done.set()

        (during, during_codes), (bad_codes, flood_s) = await asyncio.gather(
            valid_searches(client, user, rng, searches, done), flood_then_stop()
        )
    idle_s, during_s = summary(idle), summary(during)
    return {
        "bad_key_requests": bad,
        "flood_concurrency": concurrency,
        "flood_seconds": round(flood_s, 2),
        "flood_req_per_s": round(bad / flood_s, 1),
        "flood_status_counts": {str(k): v for k, v in sorted(bad_codes.items(), key=str)},
        "valid_idle": idle_s,
        "valid_during_flood": during_s,
        "valid_status_counts_idle": dict(idle_codes),
        "valid_status_counts_during_flood": dict(during_codes),
        "p50_ratio": round(during_s["p50_ms"] / idle_s["p50_ms"], 2),
        "p95_ratio": round(during_s["p95_ms"] / idle_s["p95_ms"], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host")
    ap.add_argument("--key")
    ap.add_argument("--bad", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--searches", type=int, default=200)
    args = ap.parse_args()
    if args.host:
        result = asyncio.run(run(args.host, args.key, args.bad, args.concurrency, args.searches))
    else:
        with fresh_service() as svc:
            result = asyncio.run(
                run(svc.base_url, svc.bootstrap_key, args.bad, args.concurrency, args.searches)
            )
    for name in ("valid_idle", "valid_during_flood"):
        s = result[name]
        print(f"{name:<20} n={s['n']:<5} p50 {s['p50_ms']:7.2f} ms  p95 {s['p95_ms']:7.2f} ms")
    print(
        f"flood: {result['bad_key_requests']} bad-key requests in {result['flood_seconds']} s"
        f" ({result['flood_req_per_s']}/s), statuses {result['flood_status_counts']}"
    )
    print(f"ratio during/idle: p50 {result['p50_ratio']}x  p95 {result['p95_ratio']}x")
    print(f"wrote {write_json('bench_bad_keys', result)}")


if __name__ == "__main__":
    main()
