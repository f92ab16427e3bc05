"""Metrics of the background jobs: extraction, consolidation, re-embed, webhooks, document
ingest jobs."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from serve_app.metrics.specs import (
    CONSOLIDATE_OUTCOMES,
    CONSOLIDATE_RUN_MS,
    DOCUMENT_JOB_CHUNKS,
    DOCUMENT_JOBS,
    EXTRACT_ATTEMPTS,
    EXTRACT_ERRORS,
    EXTRACT_FACTS,
    EXTRACT_LATENCY_MS,
    EXTRACT_MEMORIES,
    EXTRACT_SUCCESSES,
    EXTRACT_UNGROUNDED,
    LLM_SCHEMA_FAILURES,
    RECONCILE_DECISIONS,
    RECONCILE_REJECTED,
    REEMBED_ITEMS,
    REEMBED_PROGRESS,
    REEMBED_REMAINING,
    WEBHOOK_LAG_S,
    WEBHOOK_PENDING,
    WEBHOOK_QUEUED,
    WEBHOOK_SENT,
)
from serve_app.telemetry import LocalCounter, LocalHistogram, MetricSet, MetricSpec, Tags

__all__ = [
    "ConsolidationMetrics",
    "DocumentJobMetrics",
    "ExtractionMetrics",
    "ReembedMetrics",
    "WebhookMetrics",
]


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
        self.schema_failures = self.add(LocalCounter(LLM_SCHEMA_FAILURES))

    def schema_failure(self, purpose: str, response_format: str) -> None:
        """An answer that broke its JSON contract (extraction or summary)."""
        self.counts[f"schema_failures:{purpose}"] += 1
        self.schema_failures.inc((purpose, response_format))

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
        self.schema_failures = self.add(LocalCounter(LLM_SCHEMA_FAILURES))

    def schema_failure(self, response_format: str) -> None:
        """An insight or digest answer that broke its JSON contract."""
        self.counts["schema_failures"] += 1
        self.schema_failures.inc(("consolidate", response_format))

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
        return [
            (WEBHOOK_PENDING, (), self.state["pending"]),
            (WEBHOOK_LAG_S, (), self.state["lag_s"]),
        ]


class DocumentJobMetrics(MetricSet):
    """Document ingest jobs (services/document_jobs.py): outcomes and chunks written;
    ``counts`` (cumulative) is what the Extractor's ``status()`` shows."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Tally[str] = Tally()
        self.jobs = self.add(LocalCounter(DOCUMENT_JOBS))
        self.chunks = self.add(LocalCounter(DOCUMENT_JOB_CHUNKS))

    def outcome(self, outcome: str, chunks: int = 0) -> None:
        self.counts[outcome] += 1
        self.jobs.inc((outcome,))
        if chunks > 0:
            self.counts["chunks"] += chunks
            self.chunks.inc((), chunks)
