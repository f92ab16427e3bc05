"""Re-scoring of search and context candidates: runs by back-end and outcome, and their time."""

from __future__ import annotations

from serve_app.metrics.specs import RERANK_CALLS, RERANK_MS
from serve_app.telemetry import LocalCounter, LocalHistogram, MetricSet

__all__ = ["RerankMetrics"]


class RerankMetrics(MetricSet):
    """One count and one duration per re-scoring run."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = self.add(LocalCounter(RERANK_CALLS))
        self.ms = self.add(LocalHistogram(RERANK_MS))

    def call(self, backend: str, outcome: str, seconds: float) -> None:
        self.calls.inc((backend, outcome))
        self.ms.observe(seconds * 1000, (backend,))
