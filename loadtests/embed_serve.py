"""The Serve part of loadtests/bench_embed.py: closed-loop clients through the Embedder handle.

Runs the real ``deployments.embedder.Embedder`` under Ray in this process, with
1/8/32 concurrent clients, batched and with batching disabled (only the
user_config changes, so the same replica is reconfigured), and a no-op
deployment through the same handle path as the floor no model can go below.
Besides throughput and latency it records the CPU the replica and this process
(clients + the handle's router) spent per request.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.procstat import process_cpu_s
from loadtests.stats import percentile
from serve_app.settings import get_settings

CLIENTS = (1, 8, 32)


async def _clients(handle: Any, texts: Sequence[str], clients: int, seconds: float) -> dict:
    """One closed-loop run: ``clients`` callers for ``seconds``, each one query at a time."""
    latencies: list[float] = []
    info = await handle.model_info.remote()
    replica_cpu0, driver_cpu0 = process_cpu_s(info["pid"]), time.process_time()
    stop = time.perf_counter() + seconds

    async def client(k: int) -> None:
        i = k
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await handle.embed.remote(texts[i % len(texts)], True)
            latencies.append(time.perf_counter() - t0)
            i += clients

    start = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    elapsed = time.perf_counter() - start
    replica_cpu, driver_cpu = process_cpu_s(info["pid"]), time.process_time()
    after = await handle.model_info.remote()
    batches = max(after["batches_run"] - info["batches_run"], 1)
    return {
        "clients": clients,
        "requests": len(latencies),
        "sps": len(latencies) / elapsed,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p95_ms": 1000 * percentile(latencies, 95),
        "mean_ms": 1000 * statistics.fmean(latencies),
        "mean_batch": (after["texts_embedded"] - info["texts_embedded"]) / batches,
        # CPU per request: the replica (encode + Serve) and this process (clients + router).
        "replica_cpu_ms": 1000 * (replica_cpu - replica_cpu0) / max(len(latencies), 1),
        "client_cpu_ms": 1000 * (driver_cpu - driver_cpu0) / max(len(latencies), 1),
        "info": after,
    }


def bench_serve(
    model_dir: Path,
    texts: list[str],
    seconds: float,
    cpus: int,
    rounds: int = 1,
    worker_niceness: int | None = 0,
    throughput_optimized: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Closed-loop clients through the handle; modes alternate each round (user_config only).

    ``throughput_optimized`` runs Serve as ``make run`` does
    (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: user code and the handle's router on
    the callers' event loops, gRPC between handle and replica). The router
    then belongs to one event loop, so the whole measurement runs in one.
    """
    if throughput_optimized:  # read by every Ray process when it imports ray.serve
        os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    if worker_niceness is not None:  # read by the raylet when ray.init starts it
        os.environ["RAY_worker_niceness"] = str(worker_niceness)  # noqa: SIM112 (Ray's name)
    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        runs, info = asyncio.run(_serve_rounds(model_dir, texts, seconds, cpus, rounds))
    finally:
        ray.shutdown()
    info["throughput_optimized"] = throughput_optimized
    rows = []
    for results in runs.values():
        best = dict(max(results, key=lambda r: r["sps"]))
        best["p95_ms"] = min(r["p95_ms"] for r in results)
        best["p50_ms"] = min(r["p50_ms"] for r in results)
        best["runs"] = results
        rows.append(best)
    return rows, info


class NoopEmbedder:
    """Same handle interface as the Embedder, no model: the cost of Serve itself."""

    def __init__(self, dim: int) -> None:
        self.vector = np.zeros(dim, dtype=np.float32)
        self.calls = 0

    async def embed(self, text: str, is_query: bool = False) -> np.ndarray:
        self.calls += 1
        return self.vector

    def model_info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "batches_run": self.calls, "texts_embedded": self.calls}


async def _serve_floor(texts: list[str], seconds: float, cpus: int) -> list[dict[str, Any]]:
    """The no-op deployment through the same handle path: what no model can go below."""
    from ray import serve

    app = serve.deployment(
        NoopEmbedder,
        name="NoopEmbedder",
        max_ongoing_requests=64,
        ray_actor_options={"num_cpus": cpus},
        logging_config={"enable_access_log": False},
    ).bind(dim=384)
    serve.run(app, name="bench-noop", route_prefix=None)
    handle = serve.get_app_handle("bench-noop")
    rows = []
    for clients in CLIENTS:
        result = await _clients(handle, texts, clients, seconds)
        result.pop("info")
        result.update(mode="no-op floor", max_batch_size=1, batch_wait_timeout_s=0.0)
        rows.append(result)
        print(
            f"  serve no-op     {clients:3} clients  {result['sps']:8.1f} calls/s"
            f"      p50 {result['p50_ms']:6.1f} ms  p95 {result['p95_ms']:6.1f} ms"
            f"  CPU/request: replica {result['replica_cpu_ms']:5.2f} ms,"
            f" clients {result['client_cpu_ms']:5.2f} ms"
        )
    serve.delete("bench-noop")
    return rows


async def _serve_rounds(
    model_dir: Path, texts: list[str], seconds: float, cpus: int, rounds: int
) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], dict[str, Any]]:
    """The no-op floor once, then each batching mode per round on the same replica."""
    from ray import serve

    from deployments.embedder import Embedder

    settings = get_settings()
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    info: dict[str, Any] = {}
    modes = {
        "batched": {
            "max_batch_size": settings.embed.max_batch_size,
            "batch_wait_timeout_s": settings.embed.batch_wait_s,
        },
        "unbatched": {"max_batch_size": 1, "batch_wait_timeout_s": 0.0},
    }
    try:
        for row in await _serve_floor(texts, seconds, cpus):
            runs[(row["mode"], row["clients"])] = [row]
        for _ in range(rounds):
            for mode, user_config in modes.items():
                # Same replica: changing only user_config calls reconfigure(), no restart.
                app = Embedder.options(
                    user_config=user_config,
                    ray_actor_options={"num_cpus": cpus},
                    # as in serve_app/serve_config.yaml: no per-request access log lines
                    logging_config={"enable_access_log": False},
                ).bind(model=str(model_dir), device="cpu")
                serve.run(app, name="bench-embed", route_prefix=None)  # blocks the loop: fine
                handle = serve.get_app_handle("bench-embed")
                for clients in CLIENTS:
                    result = await _clients(handle, texts, clients, seconds)
                    info = result.pop("info")
                    info["nice"] = os.getpriority(os.PRIO_PROCESS, info["pid"])
                    result.update(mode=mode, **user_config)
                    runs.setdefault((mode, clients), []).append(result)
                    print(
                        f"  serve {mode:9} {clients:3} clients  {result['sps']:8.1f} sentences/s"
                        f"  p50 {result['p50_ms']:6.1f} ms  p95 {result['p95_ms']:6.1f} ms"
                        f"  batch {result['mean_batch']:5.1f}  CPU/request: replica"
                        f" {result['replica_cpu_ms']:5.2f} ms,"
                        f" clients {result['client_cpu_ms']:5.2f} ms"
                    )
    finally:
        await serve.shutdown_async()
    return runs, info
