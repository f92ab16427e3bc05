"""Embedder batches (size, queue wait per text, encode time, texts) and its bulk lane."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Sequence

from serve_app.metrics.specs import (
    EMBED_BATCH_SIZE,
    EMBED_BEHIND_BULK,
    EMBED_BULK_SLICES,
    EMBED_BULK_WAIT_MS,
    EMBED_ENCODE_MS,
    EMBED_QUEUE_WAIT_MS,
    EMBED_TEXTS,
)
from serve_app.telemetry import LocalCounter, LocalHistogram, MetricSet, Tags

__all__ = ["EmbedMetrics"]


class EmbedMetrics(MetricSet):
    """Embedder batches and bulk-lane turns (it is the lanes' ``LaneObserver``)."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.tags: Tags = (model,)
        self.batch_size = self.add(LocalHistogram(EMBED_BATCH_SIZE))
        self.queue_wait = self.add(LocalHistogram(EMBED_QUEUE_WAIT_MS))
        self.encode = self.add(LocalHistogram(EMBED_ENCODE_MS))
        self.texts = self.add(LocalCounter(EMBED_TEXTS))
        self.bulk_slices = self.add(LocalCounter(EMBED_BULK_SLICES))
        self.bulk_wait = self.add(LocalHistogram(EMBED_BULK_WAIT_MS))
        self.behind_bulk = self.add(LocalCounter(EMBED_BEHIND_BULK))

    def batch(self, texts: int, started: float, ended: float, waits: Sequence[float]) -> None:
        """One encoder run (perf_counter times); ``waits``: each text's arrival time."""
        tags = self.tags
        for t, n in Tally(waits).items():  # a list's texts share one arrival time
            self.queue_wait.observe((started - t) * 1000, tags, n)
        self.batch_size.observe(texts, tags)
        self.encode.observe((ended - started) * 1000, tags)
        self.texts.inc(tags, texts)

    def bulk_slice(self, waited_s: float, overdue: bool) -> None:
        """A bulk slice got its turn after ``waited_s``; ``overdue``: by the max wait."""
        self.bulk_slices.inc((*self.tags, "overdue" if overdue else "idle"))
        self.bulk_wait.observe(waited_s * 1000, self.tags)

    def interactive_behind_bulk(self) -> None:
        self.behind_bulk.inc(self.tags)
