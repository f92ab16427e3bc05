"""How metrics are recorded and sent: local aggregates, flushed to Ray periodically.

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
What the metrics are is in :mod:`serve_app.metrics`, the one place they are defined.
"""

from __future__ import annotations

import contextlib
import logging
import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from serve_app.periodic import Periodic

log = logging.getLogger("ray.serve")

FLUSH_INTERVAL_S = 1.0

Tags = tuple[str, ...]


@dataclass(frozen=True)
class MetricSpec:
    """A metric's definition: what Ray is told when the metric is created."""

    kind: Literal["counter", "gauge", "histogram"]
    name: str
    description: str
    tag_keys: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()


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
        self._periodic = Periodic(self.flush, interval_s, log=log, failed="flushing metrics failed")

    @property
    def running(self) -> bool:
        return self._periodic.running

    def start(self) -> Flusher:
        """Start on the running event loop (idempotent); without one, do nothing yet."""
        with contextlib.suppress(RuntimeError):
            self._periodic.start()
        return self

    def flush(self) -> None:
        for metric_set in self.sets:
            try:
                metric_set.flush(self.sink)
            except Exception:  # metrics must never fail the replica
                log.debug("flushing metrics failed", exc_info=True)

    async def stop(self) -> None:
        """Stop the periodic flush and send what is left (shutdown; best effort)."""
        await self._periodic.stop(final_tick=True)
