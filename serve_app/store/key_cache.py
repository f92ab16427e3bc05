"""A per-replica cache of authenticated API keys, kept honest by LISTEN/NOTIFY.

Every request authenticates, so the key lookup is one database round trip on
every chat message. Cached rows are trusted only while the replica listens on
``memserve_keys`` (a trigger on ``api_keys`` notifies every update or delete, so
a revocation reaches every replica within milliseconds); while the listener is
down the cache is bypassed, and it is cleared on every (re)connection since
notifications sent in between are lost. A TTL bounds what a missed notification
could cost anyway. Unknown keys are never cached.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

KEYS_CHANNEL = "memserve_keys"


class KeyCache:
    def __init__(
        self, ttl_s: float, max_entries: int, trusted: Callable[[], bool] = lambda: False
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.trusted = trusted  # e.g. the listener's ``connected.is_set``
        self.generation = 0  # bumped by every drop/clear: see put()
        self.hits = 0
        self.misses = 0
        self._rows: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0 and self.max_entries > 0 and self.trusted()

    def get(self, key_hash: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        hit = self._rows.get(key_hash)
        if hit is None or time.monotonic() - hit[0] > self.ttl_s:
            self._rows.pop(key_hash, None)
            self.misses += 1
            return None
        self._rows.move_to_end(key_hash)
        self.hits += 1
        return hit[1]

    def put(self, key_hash: str, row: dict[str, Any], generation: int) -> None:
        """Cache a row read from the database while ``generation`` was current.

        A drop that arrived while the row was being read (a revocation racing the
        lookup) changed the generation: the row may be stale, so it is not cached.
        """
        if not self.enabled or generation != self.generation:
            return
        self._rows[key_hash] = (time.monotonic(), row)
        self._rows.move_to_end(key_hash)
        while len(self._rows) > self.max_entries:
            self._rows.popitem(last=False)

    def drop(self, key_hash: str) -> None:
        self.generation += 1
        self._rows.pop(key_hash, None)

    def clear(self) -> None:
        self.generation += 1
        self._rows.clear()

    def __len__(self) -> int:
        return len(self._rows)
