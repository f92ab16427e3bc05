"""The retriever's owner cache: searches by outcome, hit rate and bytes held."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from serve_app.metrics.specs import RETRIEVER_BYTES, RETRIEVER_HIT_RATE, RETRIEVER_LOOKUPS
from serve_app.telemetry import LocalCounter, MetricSet, MetricSpec, Tags

__all__ = ["RetrieverMetrics"]


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
