"""Every custom metric of the service, recorded locally and flushed to Ray periodically.

A ``ray.serve.metrics`` call costs about 6 us in a replica (Python tag merging, then
OpenTelemetry in C++) and hot paths made several per request. Here they add to plain
dicts (counter totals; a histogram's per-bucket count and sum, recorded on the event
loop, no locks); a :class:`Flusher` per component sends them to Ray every
``FLUSH_INTERVAL_S`` and once more when it stops. Ray has no bulk ``observe``: a bucket
holding ``n`` values summing to ``s`` is sent as ``n`` observations of ``s / n`` (kept
inside the bucket), so Prometheus gets exact bucket counts, ``_count`` and ``_sum``.
Counters thus cost one Ray call per flush; histograms still one per value, but in the
flush, not in the request (equal values recorded together count as one local update).
Outside a replica the same code runs and Ray exports nothing: unit tests need no Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger("ray.serve")

FLUSH_INTERVAL_S = 1.0

# ---------------------------------------------------------------- buckets
HTTP_MS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000)
EMBED_MS_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EXTRACT_MS_BUCKETS = (10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000)

Tags = tuple[str, ...]


@dataclass(frozen=True)
class MetricSpec:
    """A metric's definition: what Ray is told when the metric is created."""

    kind: Literal["counter", "gauge", "histogram"]
    name: str
    description: str
    tag_keys: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()


def _c(name: str, tags: Tags, help_: str) -> MetricSpec:
    return MetricSpec("counter", f"memserve_{name}", help_, tags)


def _g(name: str, tags: Tags, help_: str) -> MetricSpec:
    return MetricSpec("gauge", f"memserve_{name}", help_, tags)


def _h(name: str, tags: Tags, buckets: tuple[float, ...], help_: str) -> MetricSpec:
    return MetricSpec("histogram", f"memserve_{name}", help_, tags, buckets)


# ---------------------------------------------------------------- every metric
_HTTP, _MODEL, _OUTCOME = ("route", "method", "status"), ("model",), ("outcome",)
HTTP_REQUEST_MS = _h("http_request_ms", _HTTP, HTTP_MS_BUCKETS, "Ingress latency per route.")
HTTP_REQUESTS = _c("http_requests", _HTTP, "Ingress requests per route and status class.")
POOL_STATS = {  # psycopg_pool get_stats() keys, exported as gauges tagged by component
    "pool_min": "Configured minimum connections.",
    "pool_max": "Configured maximum connections.",
    "pool_size": "Connections open or being opened.",
    "pool_available": "Idle connections ready to be handed out.",
    "requests_waiting": "Requests queued waiting for a connection.",
}
DB_POOL = {k: _g(f"db_{k}", ("component",), d) for k, d in POOL_STATS.items()}
EMBED_BATCH_SIZE = _h("embed_batch_size", _MODEL, BATCH_SIZE_BUCKETS, "Texts per encoder run.")
EMBED_QUEUE_WAIT_MS = _h(
    "embed_queue_wait_ms", _MODEL, EMBED_MS_BUCKETS, "Time a text waited for its encoder run."
)
EMBED_ENCODE_MS = _h("embed_encode_ms", _MODEL, EMBED_MS_BUCKETS, "Encoder time per run.")
EMBED_TEXTS = _c("embed_texts", _MODEL, "Texts embedded.")
RETRIEVER_LOOKUPS = _c("retriever_cache_lookups", _OUTCOME, "Searches by outcome (hot: cache).")
RETRIEVER_HIT_RATE = _g("retriever_cache_hit_rate", (), "Owner lookups served by the cache.")
RETRIEVER_BYTES = _g("retriever_cache_bytes", (), "Bytes held by this replica's cache.")
EXTRACT_ATTEMPTS = _c("extract_attempts", (), "Extraction LLM calls started.")
EXTRACT_SUCCESSES = _c("extract_successes", (), "Extractions that were stored.")
EXTRACT_ERRORS = _c("extract_errors", ("kind",), "Failed extractions by kind (turns stay queued).")
EXTRACT_MEMORIES = _c("extract_memories", _OUTCOME, "Extracted memories by outcome.")
EXTRACT_FACTS = _c("extract_facts", _OUTCOME, "Extracted facts by outcome.")
CONSOLIDATE_OUTCOMES = _c(
    "consolidate_outcomes", _OUTCOME, "Consolidation work by outcome (merged, insights, ...)."
)
CONSOLIDATE_RUN_MS = _h(
    "consolidate_run_ms", (), EXTRACT_MS_BUCKETS, "Time of one user's consolidation run."
)
EXTRACT_LATENCY_MS = _h(
    "extract_latency_ms", (), EXTRACT_MS_BUCKETS, "Time of one extraction (LLM, dedup, writes)."
)
REEMBED_ITEMS = _c("reembed_items", _MODEL, "Memories re-embedded into a new model's table.")
REEMBED_PROGRESS = _g("reembed_progress", _MODEL, "Share of memories in a filling model's table.")
REEMBED_REMAINING = _g("reembed_remaining", _MODEL, "Memories left to re-embed (estimate).")
CHAT_USAGE = _c("chat_usage", ("key_id", "kind"), "Chat proxy use per key: requests, tokens.")


# ---------------------------------------------------------------- local aggregates
class LocalCounter:
    """Cumulative totals per tag values; a flush sends what grew since the last one."""

    __slots__ = ("spec", "totals", "_sent")

    def __init__(self, spec: MetricSpec) -> None:
        self.spec, self._sent = spec, dict[Tags, float]()
        self.totals: dict[Tags, float] = {}

    def inc(self, tags: Tags = (), n: float = 1) -> None:
        self.totals[tags] = self.totals.get(tags, 0) + n

    def flush(self, sink: RaySink) -> None:
        for tags, total in list(self.totals.items()):
            delta = total - self._sent.get(tags, 0)
            if delta > 0:
                sink.counter(self.spec, tags, delta)
                self._sent[tags] = total


class LocalHistogram:
    """Per tag values: count and sum of the values in each bucket since the last flush."""

    __slots__ = ("spec", "_bounds", "_cells")

    def __init__(self, spec: MetricSpec) -> None:
        self.spec, self._bounds = spec, spec.boundaries
        self._cells: dict[Tags, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, tags: Tags = (), n: int = 1) -> None:
        """Record ``n`` observations of ``value`` (Prometheus buckets: ``value <= le``)."""
        cell = self._cells.get(tags)
        if cell is None:
            size = len(self._bounds) + 1
            cell = self._cells[tags] = ([0] * size, [0.0] * size)
        i = bisect_left(self._bounds, value)
        cell[0][i], cell[1][i] = cell[0][i] + n, cell[1][i] + value * n

    def flush(self, sink: RaySink) -> None:
        cells, self._cells = self._cells, {}
        for tags, (counts, sums) in cells.items():
            for i, n in enumerate(counts):
                if n:
                    sink.histogram(self.spec, tags, self.representative(i, sums[i] / n), n)

    def representative(self, bucket: int, mean: float) -> float:
        """The bucket's mean, kept inside the bucket ``(lower, upper]`` against rounding."""
        lower = self._bounds[bucket - 1] if bucket > 0 else -math.inf
        upper = self._bounds[bucket] if bucket < len(self._bounds) else math.inf
        return min(max(mean, math.nextafter(lower, math.inf)), upper)


class MetricSet:
    """One component's aggregates; subclasses add recording methods and ``gauges``."""

    def __init__(self) -> None:
        self._locals: list[LocalCounter | LocalHistogram] = []

    def add(self, metric: Any) -> Any:
        self._locals.append(metric)
        return metric

    def gauges(self) -> Iterable[tuple[MetricSpec, Tags, float]]:
        """Gauge values read from their source at flush time (default: none)."""
        return ()

    def flush(self, sink: RaySink) -> None:
        for spec, tags, value in self.gauges():
            sink.gauge(spec, tags, value)
        for metric in self._locals:
            metric.flush(sink)


# ---------------------------------------------------------------- Ray and the flusher
class RaySink:
    """Sends flushes to ``ray.serve.metrics`` objects, created on first use in the replica."""

    def __init__(self) -> None:
        self._metrics: dict[str, Any] = {}

    def _metric(self, spec: MetricSpec) -> Any:
        if spec.name not in self._metrics:
            from ray.serve import metrics as ray_metrics

            kind = getattr(ray_metrics, spec.kind.capitalize())
            extra = {"boundaries": list(spec.boundaries)} if spec.kind == "histogram" else {}
            self._metrics[spec.name] = kind(
                spec.name, description=spec.description, tag_keys=spec.tag_keys, **extra
            )
        return self._metrics[spec.name]

    def counter(self, spec: MetricSpec, tags: Tags, value: float) -> None:
        self._metric(spec).inc(value, tags=dict(zip(spec.tag_keys, tags, strict=True)))

    def gauge(self, spec: MetricSpec, tags: Tags, value: float) -> None:
        self._metric(spec).set(value, tags=dict(zip(spec.tag_keys, tags, strict=True)))

    def histogram(self, spec: MetricSpec, tags: Tags, value: float, count: int) -> None:
        metric, keys = self._metric(spec), spec.tag_keys
        for _ in range(count):  # a fresh dict each time: Serve adds its tags to it in place
            metric.observe(value, tags=dict(zip(keys, tags, strict=True)))


class Flusher:
    """Flushes metric sets every ``interval_s`` on the running loop; ``stop`` flushes once more."""

    def __init__(self, sets: Sequence[MetricSet], interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.sets, self.interval_s = list(sets), interval_s
        self.sink = RaySink()  # tests swap in a recorder with the same three methods
        self._task: asyncio.Task | None = None

    def start(self) -> Flusher:
        """Start on the running event loop (idempotent); without one, do nothing yet."""
        if self._task is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return self
            self._task = loop.create_task(self._run())
        return self

    def flush(self) -> None:
        for metric_set in self.sets:
            try:
                metric_set.flush(self.sink)
            except Exception:  # metrics must never fail the replica
                log.debug("flushing metrics failed", exc_info=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.flush()

    async def stop(self) -> None:
        """Stop the periodic flush and send what is left (shutdown; best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.flush()


# ---------------------------------------------------------------- components
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


class PoolMetrics(MetricSet):
    """``pool.get_stats()`` as gauges tagged by component, read at every flush."""

    def __init__(self, pool: Any, component: str, interval_s: float = 5.0) -> None:
        super().__init__()
        self.pool, self.component = pool, component
        self.flusher = Flusher([self], interval_s)

    def sample(self) -> dict[str, int]:
        stats = self.pool.get_stats()
        return {key: int(stats.get(key, 0)) for key in POOL_STATS}

    def gauges(self) -> Iterable[tuple[MetricSpec, Tags, float]]:
        return [(DB_POOL[k], (self.component,), v) for k, v in self.sample().items()]

    async def stop(self) -> None:
        await self.flusher.stop()


def start_pool_metrics(pool: Any, component: str, interval_s: float = 5.0) -> PoolMetrics:
    """For deployments: ``self.pool_metrics = start_pool_metrics(pool, "ingress")``."""
    metrics = PoolMetrics(pool, component, interval_s)
    metrics.flusher.start()
    return metrics


class EmbedMetrics(MetricSet):
    """Embedder batches: size, queue wait per text, encode time, texts."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.tags: Tags = (model,)
        self.batch_size = self.add(LocalHistogram(EMBED_BATCH_SIZE))
        self.queue_wait = self.add(LocalHistogram(EMBED_QUEUE_WAIT_MS))
        self.encode = self.add(LocalHistogram(EMBED_ENCODE_MS))
        self.texts = self.add(LocalCounter(EMBED_TEXTS))

    def batch(self, texts: int, started: float, ended: float, waits: Sequence[float]) -> None:
        """One encoder run (perf_counter times); ``waits``: each text's arrival time."""
        tags = self.tags
        for t, n in Tally(waits).items():  # a list's texts share one arrival time
            self.queue_wait.observe((started - t) * 1000, tags, n)
        self.batch_size.observe(texts, tags)
        self.encode.observe((ended - started) * 1000, tags)
        self.texts.inc(tags, texts)


class RetrieverMetrics(MetricSet):
    """Searches by cache outcome; the cache's hit rate and size read at each flush."""

    def __init__(self, cache: Any) -> None:
        super().__init__()
        self.cache = cache
        self.lookups = self.add(LocalCounter(RETRIEVER_LOOKUPS))

    def lookup(self, outcome: Literal["hot", "cold"]) -> None:
        self.lookups.inc((outcome,))

    def gauges(self) -> Iterable[tuple[MetricSpec, Tags, float]]:
        cache = self.cache
        return [(RETRIEVER_HIT_RATE, (), cache.hit_rate), (RETRIEVER_BYTES, (), cache.nbytes)]


class ExtractionMetrics(MetricSet):
    """Extraction outcomes and latency; ``counts`` (cumulative) is what ``status()`` shows."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Tally[str] = Tally()
        self.attempts = self.add(LocalCounter(EXTRACT_ATTEMPTS))
        self.successes = self.add(LocalCounter(EXTRACT_SUCCESSES))
        self.errors = self.add(LocalCounter(EXTRACT_ERRORS))
        self.memories = self.add(LocalCounter(EXTRACT_MEMORIES))
        self.facts = self.add(LocalCounter(EXTRACT_FACTS))
        self.latency = self.add(LocalHistogram(EXTRACT_LATENCY_MS))

    def attempt(self) -> None:
        self.counts["attempts"] += 1
        self.attempts.inc()

    def success(self, latency_ms: float) -> None:
        self.counts["successes"] += 1
        self.successes.inc()
        self.latency.observe(latency_ms)

    def error(self, kind: str) -> None:
        self.counts.update(("errors", f"error:{kind}"))
        self.errors.inc((kind,))

    def memory(self, outcome: str, n: int = 1) -> None:
        if n > 0:
            self.counts[f"memories_{outcome}"] += n
            self.memories.inc((outcome,), n)

    def fact(self, outcome: str) -> None:
        self.counts[f"facts_{outcome}"] += 1
        self.facts.inc((outcome,))


class ConsolidationMetrics(MetricSet):
    """Consolidation outcomes per run; ``counts`` (cumulative) for status and tests."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Tally[str] = Tally()
        self.outcomes = self.add(LocalCounter(CONSOLIDATE_OUTCOMES))
        self.latency = self.add(LocalHistogram(CONSOLIDATE_RUN_MS))

    def outcome(self, outcome: str, n: int = 1) -> None:
        if n > 0:
            self.counts[outcome] += n
            self.outcomes.inc((outcome,), n)

    def run(self, ms: float) -> None:
        self.counts["runs"] += 1
        self.latency.observe(ms)


class ReembedMetrics(MetricSet):
    """The re-embed worker: items written per model; progress and what is left, per flush."""

    def __init__(self) -> None:
        super().__init__()
        self.items = self.add(LocalCounter(REEMBED_ITEMS))
        self.state: dict[str, tuple[float, float]] = {}  # model -> (progress, remaining)

    def embedded(self, model: str, n: int, progress: float, remaining: float) -> None:
        self.items.inc((model,), n)
        self.state[model] = (progress, remaining)

    def gauges(self) -> Iterable[tuple[MetricSpec, Tags, float]]:
        out = []
        for model, (progress, remaining) in self.state.items():
            out.append((REEMBED_PROGRESS, (model,), progress))
            out.append((REEMBED_REMAINING, (model,), remaining))
        return out
