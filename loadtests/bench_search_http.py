"""p50/p95 of POST /v1/search over HTTP with ~1,000 memories for one user.

    python -m loadtests.bench_search_http                 # starts its own service
    python -m loadtests.bench_search_http --host http://127.0.0.1:8000 --key $KEY

Prints a table and writes loadtests/results/search_http.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import tempfile
import time
from pathlib import Path

import httpx

from loadtests.stats import percentile
from loadtests.synthetic import memory, question

RESULTS = Path(__file__).with_name("results")


async def load(client: httpx.AsyncClient, user: str, n: int, rng: random.Random) -> None:
    for start in range(0, n, 100):
        items = [{"content": memory(rng)} for _ in range(min(100, n - start))]
        r = await client.post("/v1/memories/batch", json={"user_id": user, "items": items})
        r.raise_for_status()


async def timed_searches(
    client: httpx.AsyncClient, user: str, total: int, concurrency: int, rng: random.Random
) -> tuple[list[float], float]:
    latencies: list[float] = []
    queue = [question(rng) for _ in range(total)]

    async def worker() -> None:
        while queue:
            q = queue.pop()
            t = time.perf_counter()
            r = await client.post("/v1/search", json={"user_id": user, "query": q, "top_k": 10})
            r.raise_for_status()
            latencies.append((time.perf_counter() - t) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, total / (time.perf_counter() - started)


async def run(host: str, key: str, memories: int, searches: int) -> dict:
    rng = random.Random(7)
    user = "bench_" + secrets.token_hex(4)
    limits = httpx.Limits(max_connections=64)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=host, headers=headers, timeout=60, limits=limits) as c:
        t = time.perf_counter()
        await load(c, user, memories, rng)
        load_s = time.perf_counter() - t
        await timed_searches(c, user, 30, 1, rng)  # warm-up
        out = {"memories": memories, "load_seconds": round(load_s, 2), "runs": []}
        for concurrency in (1, 8):
            lat, rps = await timed_searches(c, user, searches, concurrency, rng)
            out["runs"].append(
                {
                    "concurrency": concurrency,
                    "requests": len(lat),
                    "p50_ms": round(percentile(lat, 50), 2),
                    "p95_ms": round(percentile(lat, 95), 2),
                    "rps": round(rps, 1),
                }
            )
        await c.request("DELETE", "/v1/memories", params={"user_id": user})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", help="running service; default: start one")
    ap.add_argument("--key", help="service key for --host")
    ap.add_argument("--memories", type=int, default=1000)
    ap.add_argument("--searches", type=int, default=300)
    args = ap.parse_args()
    service = None
    if args.host:
        host, key = args.host, args.key
    else:
        from serve_app.testing.service import ServiceProcess

        key = "msk_bench_" + secrets.token_hex(8)
        service = ServiceProcess(Path(tempfile.mkdtemp(prefix="memserve-bench-")), key)
        service.start()
        host = service.base_url
        print(f"service started in {service.startup_s:.1f}s")
    try:
        result = asyncio.run(run(host, key, args.memories, args.searches))
    finally:
        if service:
            service.stop()
    print(f"\nPOST /v1/search, {result['memories']} memories for one user")
    print(f"{'clients':>8} {'requests':>9} {'p50 ms':>8} {'p95 ms':>8} {'req/s':>8}")
    for r in result["runs"]:
        print(
            f"{r['concurrency']:>8} {r['requests']:>9} {r['p50_ms']:>8} {r['p95_ms']:>8}"
            f" {r['rps']:>8}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "search_http.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
