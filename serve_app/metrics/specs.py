"""Every custom metric of the service: the one list of what it exports (names, kinds,
tags, buckets). The Grafana dashboard's test reads it through :mod:`serve_app.metrics`;
the components in the sibling modules record into these.
"""

from __future__ import annotations

from serve_app.telemetry import MetricSpec, Tags

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
EMBED_BULK_SLICES = _c(
    "embed_bulk_slices",
    ("model", "turn"),
    "Bulk-lane slices run; turn: idle (no interactive caller waited) or overdue"
    " (ran after MEMSERVE_EMBED_BULK_MAX_WAIT_S with interactive callers waiting).",
)
EMBED_BULK_WAIT_MS = _h(
    "embed_bulk_wait_ms", _MODEL, EMBED_MS_BUCKETS, "Time a bulk slice waited for its turn."
)
EMBED_BEHIND_BULK = _c(
    "embed_interactive_behind_bulk",
    _MODEL,
    "Interactive callers that arrived while a bulk slice computed (each waits for it).",
)
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
DOCUMENT_JOBS = _c(
    "document_jobs", _OUTCOME, "Document ingest jobs run: done, failed, retry, lost."
)
DOCUMENT_JOB_CHUNKS = _c("document_job_chunks", (), "Chunks written by document ingest jobs.")
CHAT_USAGE = _c("chat_usage", ("key_id", "kind"), "Chat proxy use per key: requests, tokens.")
LLM_TOKENS = _c(
    "llm_tokens",
    ("tenant", "purpose", "kind"),
    "LLM tokens per tenant (bounded: the rest are 'other') and purpose; kind: prompt,"
    " completion, cached, estimated (prompt + completion counted without upstream usage).",
)
LLM_SCHEMA_FAILURES = _c(
    "llm_schema_failures",
    ("purpose", "format"),
    "LLM answers that broke their JSON contract (no usable object, or items dropped), by"
    " purpose (extract, infer, summarize, consolidate) and response format (json_schema,"
    " json_object).",
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
RERANK_CALLS = _c(
    "rerank_calls",
    ("backend", "outcome"),
    "Re-scoring runs of search/context candidates (a request's rerank) by back-end (onnx, llm) and"
    " outcome: ok, or the fallback's reason (over_budget, llm_unavailable, llm_malformed).",
)
RERANK_MS = _h("rerank_ms", ("backend",), HTTP_MS_BUCKETS, "Time of one re-scoring run (ms).")
