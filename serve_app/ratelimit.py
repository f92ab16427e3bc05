"""Per-key rate limit: a token bucket per API key id.

The buckets live in the ingress replica's memory, so with N ingress replicas a
key gets up to N times its rate in total (documented trade-off: no extra hop or
shared store on the hot path). A key's own ``rate_limit_per_s`` (api_keys
column) overrides the default; the burst scales with it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def _params(self, override: float | None) -> tuple[float, float]:
        if override is None:
            return self.rate, float(self.burst)
        # A per-key rate keeps the default's burst-to-rate ratio, at least one request.
        ratio = self.burst / self.rate if self.rate > 0 else 1.0
        return override, max(1.0, override * ratio)

    def acquire(self, key: str, override: float | None = None) -> float:
        """0.0 when the request may proceed, else the seconds until it would."""
        rate, burst = self._params(override)
        if rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = _Bucket(burst, now)
                self._buckets[key] = bucket
                if len(self._buckets) > self.max_keys:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
                bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
                bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / rate


def retry_after_header(wait_s: float) -> str:
    """Retry-After is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(wait_s)))
