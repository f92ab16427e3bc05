"""Every custom metric of the service, and the components that record them.

The definitions below are the one list of what the service exports (the Grafana
dashboard's test reads it); :mod:`serve_app.telemetry` is how values are aggregated
locally and flushed to Ray.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from serve_app.telemetry import (
    Flusher,
    LocalCounter,
    LocalHistogram,
    MetricSet,
    MetricSpec,
    RaySink,
    Tags,
)

__all__ = ["Flusher", "MetricSet", "MetricSpec", "RaySink", "LocalCounter", "LocalHistogram"]

# ---------------------------------------------------------------- buckets
HTTP_MS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000)
EMBED_MS_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EXTRACT_MS_BUCKETS = (10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000)


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
RECONCILE_DECISIONS = _c(
    "reconcile_decisions", _OUTCOME, "Reconcile decisions applied (add, update, invalidate, ...)."
)
RECONCILE_REJECTED = _c(
    "reconcile_rejected_aliases",
    ("reason",),
    "Decisions ignored: alias not shown (unknown) or naming another owner's row (foreign).",
)
EXTRACT_UNGROUNDED = _c(
    "extraction_ungrounded",
    ("kind", "reason"),
    "Extracted items dropped: copied from the known block, not said in the new turns.",
)
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
WEBHOOK_QUEUED = _c("webhook_queued", (), "Webhook deliveries queued from the event feed.")
WEBHOOK_SENT = _c("webhook_sent", _OUTCOME, "Webhook attempts: delivered, failed, dead.")
WEBHOOK_PENDING = _g("webhook_pending", (), "Webhook deliveries waiting to be sent.")
WEBHOOK_LAG_S = _g("webhook_lag_s", (), "Age (s) of the oldest pending delivery's event.")
CHAT_USAGE = _c("chat_usage", ("key_id", "kind"), "Chat proxy use per key: requests, tokens.")
LLM_TOKENS = _c(
    "llm_tokens",
    ("tenant", "purpose", "kind"),
    "LLM tokens per tenant (bounded: the rest are 'other') and purpose; kind: prompt,"
    " completion, cached, estimated (prompt + completion counted without upstream usage).",
)
LLM_CALLS = _c("llm_calls", ("tenant", "purpose", "outcome"), "LLM calls metered, by outcome.")
LLM_BUDGET_EVENTS = _c(
    "llm_budget_events",
    ("tenant", "group", "event"),
    "Budget events: soft (threshold crossed, once per window), over (a call refused or deferred).",
)
INGEST_BATCHES = _c(
    "ingest_batches",
    ("path",),
    "Batch adds longer than a pipeline chunk: pipelined, or single (no free pipeline slot).",
)
INGEST_OPEN = _h(
    "ingest_pipelines_open",
    (),
    (0, 1, 2, 4, 8, 16),
    "Pipelined batch adds already running on the replica when one starts (its depth).",
)


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
        self.decisions = self.add(LocalCounter(RECONCILE_DECISIONS))
        self.rejected_aliases = self.add(LocalCounter(RECONCILE_REJECTED))
        self.ungrounded_items = self.add(LocalCounter(EXTRACT_UNGROUNDED))
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

    def decision(self, outcome: str) -> None:
        """One reconcile decision's outcome (add, update, invalidate, noop, conflict, ...)."""
        self.counts[f"reconcile_{outcome}"] += 1
        self.decisions.inc((outcome,))

    def ungrounded(self, kind: str, reason: str) -> None:
        """An extracted memory or fact dropped by the grounding check (kind: memory|fact)."""
        self.counts[f"ungrounded_{kind}"] += 1
        self.ungrounded_items.inc((kind, reason))

    def rejected(self, reason: str) -> None:
        """An alias the model answered that was not shown (unknown) or is not the owner's."""
        self.counts[f"reconcile_rejected_{reason}"] += 1
        self.rejected_aliases.inc((reason,))


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


class SpendMetrics(MetricSet):
    """LLM tokens, calls and budget events per tenant; at most ``max_tenants`` tenants get
    their own label (first seen by this replica), the rest share ``other``."""

    OTHER = "other"

    def __init__(self, max_tenants: int = 50) -> None:
        super().__init__()
        self.max_tenants = max(0, max_tenants)
        self._labelled: set[str] = set()
        self.counts: Tally[str] = Tally()
        self.tokens = self.add(LocalCounter(LLM_TOKENS))
        self.calls = self.add(LocalCounter(LLM_CALLS))
        self.budget = self.add(LocalCounter(LLM_BUDGET_EVENTS))

    def tenant(self, tenant_id: str) -> str:
        if tenant_id in self._labelled:
            return tenant_id
        if len(self._labelled) < self.max_tenants:
            self._labelled.add(tenant_id)
            return tenant_id
        return self.OTHER

    def call(self, tenant_id: str, purpose: str, outcome: str, tokens: dict[str, int]) -> None:
        t = self.tenant(tenant_id)
        self.calls.inc((t, purpose, outcome))
        self.counts[f"calls_{purpose}"] += 1
        for kind, n in tokens.items():
            if n > 0:
                self.tokens.inc((t, purpose, kind), n)
                self.counts[f"{kind}_{purpose}"] += n

    def budget_event(self, tenant_id: str, group: str, event: str) -> None:
        self.counts[f"budget_{event}_{group}"] += 1
        self.budget.inc((self.tenant(tenant_id), group, event))


class WebhookMetrics(MetricSet):
    """The webhook dispatcher: queued and sent (per outcome), pending and lag per round."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Tally[str] = Tally()
        self.queued = self.add(LocalCounter(WEBHOOK_QUEUED))
        self.sent = self.add(LocalCounter(WEBHOOK_SENT))
        self.state = {"pending": 0.0, "lag_s": 0.0}

    def queue(self, n: int) -> None:
        if n > 0:
            self.counts["queued"] += n
            self.queued.inc((), n)

    def outcome(self, outcome: str) -> None:
        self.counts[outcome] += 1
        self.sent.inc((outcome,))

    def gauges(self) -> Iterable[tuple[MetricSpec, Tags, float]]:
        return [(WEBHOOK_PENDING, (), self.state["pending"]),
                (WEBHOOK_LAG_S, (), self.state["lag_s"])]  # fmt: skip
