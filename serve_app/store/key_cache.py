"""A per-replica cache of authenticated API keys, kept honest by LISTEN/NOTIFY.

Every request authenticates, so the key lookup is one database round trip on
every chat message. Cached rows are trusted only while the replica listens on
``memserve_keys`` (a trigger on ``api_keys`` notifies every update or delete, so
a revocation reaches every replica within milliseconds); while the listener is
down the cache is bypassed, and it is cleared on every (re)connection since
notifications sent in between are lost. A TTL bounds what a missed notification
could cost anyway.

Unknown keys are remembered for a short ``negative_ttl_s`` so a flood of bad keys
costs no database round trip each. That needs no trust in the listener: a new
key's INSERT notifies its hash (migration 0007), which forgets it here, and the
short TTL bounds the rest (an unknown key is never a security risk when cached).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

KEYS_CHANNEL = "memserve_keys"
NEW_KEY = "new:"  # payload prefix of an INSERT: only a cached "unknown" is wrong now


class KeyCache:
    def __init__(
        self,
        ttl_s: float,
        max_entries: int,
        trusted: Callable[[], bool] = lambda: False,
        *,
        negative_ttl_s: float = 0.0,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.trusted = trusted  # e.g. the listener's ``healthy``
        self.negative_ttl_s = negative_ttl_s
        self.generation = 0  # bumped by every notification and clear: see put_unknown()
        self.row_generation = 0  # bumped by changes to existing keys only: see put()
        self.hits = 0
        self.misses = 0
        self.unknown_hits = 0
        self._rows: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._unknown: OrderedDict[str, float] = OrderedDict()  # key hash -> since

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0 and self.max_entries > 0 and self.trusted()

    def get(self, key_hash: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        hit = self._rows.get(key_hash)
        if hit is None or time.monotonic() - hit[0] > self.ttl_s:
            self.misses += 1  # an expired row stays: known() still vouches for the caller
            return None
        self._rows.move_to_end(key_hash)
        self.hits += 1
        return hit[1]

    def token(self) -> tuple[int, int]:
        """Taken before a database read; ``put``/``put_unknown`` refuse a stale one."""
        return self.row_generation, self.generation

    def put(self, key_hash: str, row: dict[str, Any], token: tuple[int, int]) -> None:
        """Cache a row read from the database while ``token`` was current.

        A revocation that arrived while the row was being read changed the row
        generation: the row may be stale, so it is not cached. A new key's INSERT
        does not count here (it cannot make an existing row stale).
        """
        if not self.enabled or token[0] != self.row_generation:
            return
        self._rows[key_hash] = (time.monotonic(), row)
        self._rows.move_to_end(key_hash)
        while len(self._rows) > self.max_entries:
            self._rows.popitem(last=False)

    def known(self, key_hash: str) -> bool:
        """The key was valid when last read (its row may have expired, not been revoked).

        Such a caller skips the per-address guard for strangers: a valid key behind the
        same proxy as a flood of bad ones is looked up again, not refused.
        """
        return key_hash in self._rows

    def is_unknown(self, key_hash: str) -> bool:
        """True when the key was looked up and not found less than ``negative_ttl_s`` ago."""
        since = self._unknown.get(key_hash)
        if since is None:
            return False
        if time.monotonic() - since > self.negative_ttl_s:
            self._unknown.pop(key_hash, None)
            return False
        self.unknown_hits += 1
        return True

    def put_unknown(self, key_hash: str, token: tuple[int, int]) -> None:
        """Remember a failed lookup, unless a change (an INSERT) arrived while it ran."""
        if self.negative_ttl_s <= 0 or self.max_entries <= 0 or token[1] != self.generation:
            return
        self._unknown[key_hash] = time.monotonic()
        self._unknown.move_to_end(key_hash)
        while len(self._unknown) > self.max_entries:
            self._unknown.popitem(last=False)

    def drop(self, key_hash: str) -> None:
        """A notification: the key changed (or, ``new:<hash>``, was created)."""
        self.generation += 1
        if key_hash.startswith(NEW_KEY):
            self._unknown.pop(key_hash[len(NEW_KEY) :], None)
            return
        self.row_generation += 1
        self._rows.pop(key_hash, None)
        self._unknown.pop(key_hash, None)

    def clear(self) -> None:
        self.generation += 1
        self.row_generation += 1
        self._rows.clear()
        self._unknown.clear()

    def __len__(self) -> int:
        return len(self._rows)
