"""Extraction outcome counters: always kept locally, exported through Ray when in Serve."""

from __future__ import annotations

from collections import Counter as LocalCounter
from typing import Any

_MS_BOUNDARIES = [10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000]


class ExtractionMetrics:
    """Counts attempts/successes/errors, memory outcomes and latency.

    ``counts`` (a plain Counter) is what tests and ``status()`` read; with
    ``use_ray`` the same events go to ``ray.serve.metrics`` for the dashboard.
    """

    def __init__(self, use_ray: bool = False) -> None:
        self.counts: LocalCounter[str] = LocalCounter()
        self._ray: dict[str, Any] = {}
        if use_ray:
            from ray.serve.metrics import Counter, Histogram

            self._ray = {
                "attempts": Counter(
                    "memserve_extract_attempts", description="Extraction LLM calls started."
                ),
                "successes": Counter(
                    "memserve_extract_successes", description="Extractions that were stored."
                ),
                "errors": Counter(
                    "memserve_extract_errors",
                    description="Failed extractions by kind (turns stay queued).",
                    tag_keys=("kind",),
                ),
                "memories": Counter(
                    "memserve_extract_memories",
                    description="Extracted memories by outcome (saved, merged, skipped).",
                    tag_keys=("outcome",),
                ),
                "facts": Counter(
                    "memserve_extract_facts",
                    description="Extracted facts by outcome.",
                    tag_keys=("outcome",),
                ),
                "latency": Histogram(
                    "memserve_extract_latency_ms",
                    description="Time of one extraction (LLM + dedup + writes).",
                    boundaries=_MS_BOUNDARIES,
                ),
            }

    def attempt(self) -> None:
        self.counts["attempts"] += 1
        if self._ray:
            self._ray["attempts"].inc()

    def success(self, latency_ms: float) -> None:
        self.counts["successes"] += 1
        if self._ray:
            self._ray["successes"].inc()
            self._ray["latency"].observe(latency_ms)

    def error(self, kind: str) -> None:
        self.counts["errors"] += 1
        self.counts[f"error:{kind}"] += 1
        if self._ray:
            self._ray["errors"].inc(tags={"kind": kind})

    def memory(self, outcome: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.counts[f"memories_{outcome}"] += n
        if self._ray:
            self._ray["memories"].inc(n, tags={"outcome": outcome})

    def fact(self, outcome: str) -> None:
        self.counts[f"facts_{outcome}"] += 1
        if self._ray:
            self._ray["facts"].inc(tags={"outcome": outcome})
