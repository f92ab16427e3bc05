"""Token buckets charged in work units, and what a request's work is.

Buckets live in the ingress replica's memory, so with N ingress replicas a
bucket gets up to N times its rate in total (documented trade-off: no extra hop
or shared store on the hot path). A service key serves a whole platform, so its
buckets are per (key, end user): one user who floods runs dry alone. A key's own
``rate_limit_per_s`` (api_keys column) overrides the default; the burst scales
with it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# One unit per item (a request without items is one) plus one per KiB of body (about
# 256 embedded tokens): a search costs ~1, a batch of 100 short memories ~110, and a
# batch of 100 memories of 8,000 characters ~880.
BYTES_PER_UNIT = 1024
# The slowest rate a key or a tenant may set (0 turns a limit off): below it a bucket
# refills once in hours, and at 5e-324 a wait is infinite.
MIN_RATE_PER_S = 0.001
# The longest Retry-After a refusal names, whatever the wait computes to (a client that
# honours it comes back within the hour; an infinite wait is not a header).
MAX_RETRY_AFTER_S = 3600
_ITEM_LISTS = ("items", "messages", "memories")


def work_units(body: Any, body_bytes: int) -> float:
    """The work a request asks for, from its parsed JSON body (any shape) and its size."""
    items = 1
    if isinstance(body, dict):
        for name in _ITEM_LISTS:
            value = body.get(name)
            if isinstance(value, list):
                items = max(1, len(value))
                break
    return items + body_bytes / BYTES_PER_UNIT


def end_user(body: Any) -> str | None:
    """The end user a parsed JSON body names, whose bucket it is charged to: ``user_id`` or
    ``user`` at the top, else mem0 v3's ``filters`` (``user_id`` there or in an ``AND``
    part, at any depth), where the mem0 routes take the owner from too."""
    if not isinstance(body, dict):
        return None
    for name in ("user_id", "user"):
        if isinstance(body.get(name), str):
            return body[name]
    pending, seen = [body.get("filters")], 0
    while pending and seen < 100:  # bounded: a deep or wide AND is refused by the route
        filters, seen = pending.pop(), seen + 1
        if not isinstance(filters, dict):
            continue
        user = filters.get("user_id")
        if isinstance(user, str) and user != "*":
            return user
        if isinstance(filters.get("AND"), list):
            pending.extend(reversed(filters["AND"]))
    return None


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
            return self.rate, float(max(self.burst, 1))
        # A per-key rate keeps the default's burst-to-rate ratio, at least one unit.
        ratio = self.burst / self.rate if self.rate > 0 else 1.0
        return override, max(1.0, override * ratio)

    def _refilled(self, key: str, rate: float, burst: float) -> _Bucket:
        now = self.clock()
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
        return bucket

    def acquire(self, key: str, override: float | None = None, cost: float = 1.0) -> float:
        """0.0 when ``cost`` units may be spent now, else the seconds until they could be.

        A request costlier than the whole burst passes on a full bucket (and drives it
        negative), so a legitimate big batch is slowed down, never refused forever.
        """
        rate, burst = self._params(override)
        if rate <= 0:
            return 0.0
        with self._lock:
            bucket = self._refilled(key, rate, burst)
            if bucket.tokens >= min(cost, burst):
                bucket.tokens -= cost
                return 0.0
            return (min(cost, burst) - bucket.tokens) / rate

    def wait(self, key: str, override: float | None = None) -> float:
        """Seconds until one unit is available, without spending it (0.0: now)."""
        rate, burst = self._params(override)
        if rate <= 0:
            return 0.0
        with self._lock:
            bucket = self._refilled(key, rate, burst)
            return 0.0 if bucket.tokens >= 1.0 else (1.0 - bucket.tokens) / rate


def retry_after_header(wait_s: float) -> str:
    """Retry-After is whole seconds: never 0 for a refused request, never past
    :data:`MAX_RETRY_AFTER_S` (an infinite or NaN wait included)."""
    if not math.isfinite(wait_s) or wait_s >= MAX_RETRY_AFTER_S:
        return str(MAX_RETRY_AFTER_S)
    return str(max(1, math.ceil(wait_s)))
