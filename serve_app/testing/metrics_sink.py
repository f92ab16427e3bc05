"""A metrics sink that keeps what a flush sends (Ray's exporter cannot be read back in-process)."""

from __future__ import annotations

from serve_app.telemetry import MetricSpec


class Recorder:
    """A sink with RaySink's three methods, keeping every call."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple], float] = {}
        self.gauges: dict[tuple[str, tuple], float] = {}
        self.observations: list[tuple[str, tuple, float, int]] = []

    def counter(self, spec: MetricSpec, tags: tuple, value: float) -> None:
        key = (spec.name, tags)
        self.counters[key] = self.counters.get(key, 0) + value

    def gauge(self, spec: MetricSpec, tags: tuple, value: float) -> None:
        self.gauges[(spec.name, tags)] = value

    def histogram(self, spec: MetricSpec, tags: tuple, value: float, count: int) -> None:
        self.observations.append((spec.name, tags, value, count))
