"""Access tracking: what search and context return is counted in memory and written
in batches, off the request path.

A search only adds ids to a dict (no I/O, no await); a background task writes one
``UPDATE ... FROM unnest`` per flush interval. The write bumps no owner version, so
it never invalidates a retriever cache (cached rows keep the access fields they were
loaded with until the owner's next write; ``GET`` shows the current values).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime

from psycopg_pool import AsyncConnectionPool

from serve_app.periodic import Periodic

log = logging.getLogger(__name__)

_FLUSH_SQL = (
    "UPDATE memory_items m SET access_count = m.access_count + u.n,"
    " last_accessed_at = greatest(m.last_accessed_at, u.at)"
    " FROM unnest(%(tenants)s::text[], %(ids)s::uuid[], %(counts)s::int[],"
    " %(ats)s::timestamptz[]) AS u(tenant_id, id, n, at)"
    " WHERE m.id = u.id AND m.tenant_id = u.tenant_id"
)


class AccessTracker:
    def __init__(self, pool: AsyncConnectionPool, *, flush_s: float, max_pending: int) -> None:
        self.pool = pool
        self.flush_s = flush_s
        self.max_pending = max_pending
        self._pending: dict[tuple[str, uuid.UUID], tuple[int, datetime]] = {}
        self._periodic = Periodic(
            self.flush, flush_s, log=log, failed="writing access counts failed"
        )  # a lost batch of counters must not stop tracking
        self.dropped = 0
        self.written = 0

    def note(self, tenant_id: str, ids: Iterable[uuid.UUID]) -> None:
        """Count one access of each id (cheap: called on the search path)."""
        now = datetime.now(UTC)
        pending = self._pending
        for i in ids:
            key = (tenant_id, i)
            seen = pending.get(key)
            if seen is not None:
                pending[key] = (seen[0] + 1, now)
            elif len(pending) < self.max_pending:
                pending[key] = (1, now)
            else:
                self.dropped += 1

    async def flush(self) -> int:
        """Write what was counted since the last flush; returns the memories written."""
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}
        keys = sorted(batch, key=lambda k: (k[0], str(k[1])))  # one lock order for all writers
        params = {
            "tenants": [k[0] for k in keys],
            "ids": [k[1] for k in keys],
            "counts": [batch[k][0] for k in keys],
            "ats": [batch[k][1] for k in keys],
        }
        async with self.pool.connection() as conn:
            await conn.execute(_FLUSH_SQL, params)
        self.written += len(keys)
        return len(keys)

    def start(self) -> AccessTracker:
        self._periodic.start()
        return self

    async def stop(self) -> None:
        await self._periodic.stop(final_tick=True)
