"""Custom Ray Serve metrics: HTTP latency per route and DB pool usage.

Both go through ``ray.serve.metrics`` so Ray exports them on every node's
Prometheus endpoint (and the dashboard's Metrics view) with the deployment,
replica and application tags Serve adds. Outside a replica they are harmless
no-ops, so the FastAPI app stays usable in plain unit tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from psycopg_pool import AsyncConnectionPool
from ray.serve.metrics import Counter, Gauge, Histogram

log = logging.getLogger("ray.serve")

MS_BOUNDARIES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000]
UNMATCHED = "unmatched"  # one label for every path no route matched (no cardinality blow-up)

# get_stats() keys exported as gauges: pool_size, pool_available, requests_waiting...
POOL_STATS = {
    "pool_min": "Configured minimum connections.",
    "pool_max": "Configured maximum connections.",
    "pool_size": "Connections open or being opened.",
    "pool_available": "Idle connections ready to be handed out.",
    "requests_waiting": "Requests queued waiting for a connection.",
}


def route_template(scope: dict[str, Any]) -> str:
    """The matched route's path template (``/v1/memories/{memory_id}``), never the raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


def status_class(status: int) -> str:
    return f"{status // 100}xx"


class RequestMetrics:
    """ASGI middleware: latency histogram + request counter per (route, method, status class).

    Plain ASGI (not BaseHTTPMiddleware) so it adds microseconds, not a task per request.
    Metrics are created on the first request, inside the replica, where Serve's
    context tags exist.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._latency: Histogram | None = None
        self._count: Counter | None = None

    def _metrics(self) -> tuple[Histogram, Counter]:
        if self._latency is None or self._count is None:
            keys = ("route", "method", "status")
            self._latency = Histogram(
                "memserve_http_request_ms",
                description="HTTP request latency in the ingress, per route template.",
                boundaries=MS_BOUNDARIES,
                tag_keys=keys,
            )
            self._count = Counter(
                "memserve_http_requests",
                description="HTTP requests handled by the ingress, per route and status class.",
                tag_keys=keys,
            )
        return self._latency, self._count

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.record(scope, status["code"], (time.perf_counter() - started) * 1000)

    def record(self, scope: dict, status: int, elapsed_ms: float) -> None:
        try:
            latency, count = self._metrics()
            tags = {
                "route": route_template(scope),
                "method": scope.get("method", ""),
                "status": status_class(status),
            }
            latency.observe(elapsed_ms, tags=tags)
            count.inc(1, tags=tags)
        except Exception:  # metrics must never fail a request
            log.debug("recording request metrics failed", exc_info=True)


class PoolMetrics:
    """Samples ``pool.get_stats()`` every ``interval_s`` into gauges tagged by component."""

    def __init__(self, pool: AsyncConnectionPool, component: str, interval_s: float = 5.0) -> None:
        self.pool = pool
        self.component = component
        self.interval_s = interval_s
        self._gauges = {
            key: Gauge(f"memserve_db_{key}", description=desc, tag_keys=("component",))
            for key, desc in POOL_STATS.items()
        }
        self._task: asyncio.Task | None = None

    def sample(self) -> dict[str, int]:
        """Set every gauge from the pool's current stats; returns what was set."""
        stats = self.pool.get_stats()
        values = {key: int(stats.get(key, 0)) for key in POOL_STATS}
        for key, value in values.items():
            self._gauges[key].set(value, tags={"component": self.component})
        return values

    def start(self) -> PoolMetrics:
        """Start sampling on the running event loop (call from the replica's constructor)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.debug("sampling pool stats failed", exc_info=True)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def start_pool_metrics(
    pool: AsyncConnectionPool, component: str, interval_s: float = 5.0
) -> PoolMetrics:
    """Convenience for deployments: ``self.pool_metrics = start_pool_metrics(pool, "ingress")``."""
    return PoolMetrics(pool, component, interval_s).start()
