"""Counting chat-proxy use per API key: a metric and the queryable ``chat_usage`` table.

The metric (``memserve_chat_usage{key_id, kind}``) is for dashboards and alerts;
the table answers "who spent what, which day" (``GET /v1/chat/usage``). Both are
written off the answer's path: a chat call only adds to a dict keyed by (key, UTC
day); a background task writes what was summed in one upsert per flush interval
(as access tracking does), sooner when ``max_pending`` keys wait, and once more on
shutdown. A failed write is logged and its sums kept for the next flush, never the
caller's error. :meth:`ChatUsageMeter.report` adds the sums not yet written to the
table's rows, so a key sees its own use at once (on the replica that served it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, date, datetime
from typing import Any

from serve_app.metrics import CHAT_USAGE
from serve_app.periodic import Periodic
from serve_app.store.chat_usage import KINDS, ChatUsageStore, Usage, UsageDelta
from serve_app.telemetry import Flusher, LocalCounter, MetricSet

log = logging.getLogger(__name__)

PendingKey = tuple[str, date]  # (key_id, UTC day)


class ChatUsageMeter(MetricSet):
    """Sums chat use per (key, day) in memory and writes the sums in batches.

    Memory is bounded: at ``max_pending`` keys an early flush starts; while writes
    fail, new keys beyond twice that are dropped (counted in ``dropped``, logged).
    """

    def __init__(
        self, store: ChatUsageStore | None, *, flush_s: float = 2.0, max_pending: int = 10_000
    ) -> None:
        super().__init__()
        self.store = store
        self.max_pending = max_pending
        self.counter = self.add(LocalCounter(CHAT_USAGE))
        self.flusher = Flusher([self])
        self._pending: dict[PendingKey, tuple[str, Usage]] = {}
        # Held while a batch is out of ``_pending`` but not yet committed, and by
        # ``report`` around its read: a reader sees each call once, table or memory.
        self._lock = asyncio.Lock()
        self._periodic = Periodic(self.flush, flush_s, log=log, failed="writing chat usage failed")
        self._early: asyncio.Task[None] | None = None
        self.dropped = 0
        self.flushes = 0  # statements written
        self.written = 0  # (key, day) rows written

    def count(self, key_id: str, tenant_id: str, usage: Usage) -> None:
        """Count one call (cheap: no I/O; called on the chat path)."""
        for kind in KINDS:
            if n := getattr(usage, kind):
                self.counter.inc((key_id, kind), n)
        self.flusher.start()
        if self.store is None or not key_id:
            return
        self._add((key_id, datetime.now(UTC).date()), tenant_id, usage)
        with contextlib.suppress(RuntimeError):  # no running loop: flushed by aclose
            self._periodic.start()

    @property
    def pending(self) -> int:
        """(key, day) sums waiting for the next flush."""
        return len(self._pending)

    def _add(self, key: PendingKey, tenant_id: str, usage: Usage) -> None:
        seen = self._pending.get(key)
        if seen is not None:
            self._pending[key] = (tenant_id, seen[1] + usage)
            return
        if len(self._pending) >= self.max_pending:
            self._flush_early()
        if len(self._pending) >= 2 * self.max_pending:
            if not self.dropped:
                log.error("chat usage writes are failing; dropping the use of new keys")
            self.dropped += 1
            return
        self._pending[key] = (tenant_id, usage)

    def _flush_early(self) -> None:
        if self._early is None or self._early.done():
            with contextlib.suppress(RuntimeError):
                self._early = asyncio.get_running_loop().create_task(self._flush_logged())

    async def _flush_logged(self) -> None:
        try:
            await self.flush()
        except Exception:
            log.warning("writing chat usage failed", exc_info=True)

    async def flush(self) -> int:
        """Write the sums counted since the last flush in one statement; returns the rows.

        On failure the sums go back to pending (the next flush retries them) and it raises.
        """
        if self.store is None:
            return 0
        async with self._lock:
            if not self._pending:
                return 0
            batch, self._pending = self._pending, {}
            deltas = [UsageDelta(k, t, d, u) for (k, d), (t, u) in batch.items()]
            try:
                await self.store.add(deltas)
            except BaseException:
                for key, (tenant_id, usage) in batch.items():
                    self._add(key, tenant_id, usage)
                raise
            self.flushes += 1
            self.written += len(deltas)
            return len(deltas)

    async def report(self, tenant_id: str, key_id: str | None = None) -> list[dict[str, Any]]:
        """Per key and day, newest first, written and pending together: one key's rows,
        or the tenant's (key_id None)."""
        if self.store is None:
            return []
        async with self._lock:  # no batch is in flight while the table is read
            rows = await self.store.list(tenant_id, key_id)
            pending = {
                (k, d.isoformat()): u
                for (k, d), (t, u) in self._pending.items()
                if t == tenant_id and key_id in (None, k)
            }
        merged: list[dict[str, Any]] = []
        for row in rows:
            usage = pending.pop((row["key_id"], row["day"]), None)
            merged.append(_with(row, usage) if usage is not None else dict(row))
        merged += [_with({"key_id": k, "day": d}, u) for (k, d), u in pending.items()]
        merged.sort(key=lambda r: r["key_id"])
        merged.sort(key=lambda r: r["day"], reverse=True)
        return merged[:1000]

    async def aclose(self) -> None:
        """Stop flushing and write what is left (shutdown). Never cancels a write in
        flight: the loop and an early flush are stopped while no batch is out."""
        async with self._lock:
            await self._periodic.stop()
            if self._early is not None:
                self._early.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._early
                self._early = None
        try:
            await self.flush()
        except Exception:
            log.error("writing chat usage on shutdown failed; %d sums lost", self.pending)
        await self.flusher.stop()


def _with(row: dict[str, Any], usage: Usage) -> dict[str, Any]:
    """``row`` (key_id, day and maybe counts) with ``usage`` added to its counts."""
    return {**row, **{k: row.get(k, 0) + getattr(usage, k) for k in KINDS}}
