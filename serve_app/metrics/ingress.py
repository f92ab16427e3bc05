"""Metrics of the ingress: request latency and count per route template (an ASGI
middleware), and which path long batch adds take."""

from __future__ import annotations

import time
from typing import Any

from serve_app.metrics.specs import HTTP_REQUEST_MS, HTTP_REQUESTS, INGEST_BATCHES, INGEST_OPEN
from serve_app.telemetry import Flusher, LocalCounter, LocalHistogram, MetricSet

__all__ = ["IngestMetrics", "RequestMetrics", "UNMATCHED", "route_template", "status_class"]


UNMATCHED = "unmatched"  # one label for every path no route matched (no cardinality blow-up)


def route_template(scope: dict[str, Any]) -> str:
    """The matched route's path template (``/v1/memories/{memory_id}``), never the raw path."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED


def status_class(status: int) -> str:
    return f"{status // 100}xx"


class RequestMetrics:
    """ASGI middleware: latency and count per (route, method, status class), about 1 us.

    Its flusher starts with the first request and flushes a last time at lifespan shutdown.
    """

    def __init__(self, app: Any) -> None:
        self.app, self.metrics = app, MetricSet()
        self.latency = self.metrics.add(LocalHistogram(HTTP_REQUEST_MS))
        self.requests = self.metrics.add(LocalCounter(HTTP_REQUESTS))
        self.flusher = Flusher([self.metrics])

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                receive = self._on_shutdown(receive)
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.record(scope, status, (time.perf_counter() - started) * 1000)

    def _on_shutdown(self, receive: Any) -> Any:
        async def receive_wrapper() -> dict:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.flusher.stop()
            return message

        return receive_wrapper

    def record(self, scope: dict, status: int, elapsed_ms: float) -> None:
        tags = (route_template(scope), scope.get("method", ""), status_class(status))
        self.latency.observe(elapsed_ms, tags)
        self.requests.inc(tags)
        self.flusher.start()  # once: the first request runs on the replica's loop


class IngestMetrics(MetricSet):
    """Long batch adds (services/ingest_pipeline.py): which path each took, and how many
    pipelined batches were already holding a connection when a pipelined one started."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = self.add(LocalCounter(INGEST_BATCHES))
        self.open = self.add(LocalHistogram(INGEST_OPEN))
        self.flusher = Flusher([self])

    def batch(self, pipelined: bool, open_before: int) -> None:
        self.batches.inc(("pipelined" if pipelined else "single",))
        if pipelined:
            self.open.observe(open_before, ())
        self.flusher.start()  # once: the first batch runs on the replica's loop
