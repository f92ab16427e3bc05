"""Connection pool usage (``pool.get_stats()``) as gauges tagged by component."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from serve_app.metrics.specs import DB_POOL, POOL_STATS
from serve_app.telemetry import Flusher, MetricSet, MetricSpec, Tags

__all__ = ["PoolMetrics", "start_pool_metrics"]


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
