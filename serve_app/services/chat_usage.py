"""Counting chat-proxy use per API key: a metric and the queryable ``chat_usage`` table.

The metric (``memserve_chat_usage{key_id, kind}``) is for dashboards and alerts;
the table answers "who spent what, which day" (``GET /v1/chat/usage``). Both are
written off the answer's path: a failed count is logged, never the caller's error.
"""

from __future__ import annotations

import asyncio
import logging

from serve_app.metrics import CHAT_USAGE
from serve_app.store.chat_usage import ChatUsageStore, Usage
from serve_app.telemetry import Flusher, LocalCounter, MetricSet

log = logging.getLogger(__name__)


class ChatUsageMeter(MetricSet):
    def __init__(self, store: ChatUsageStore | None) -> None:
        super().__init__()
        self.store = store
        self.counter = self.add(LocalCounter(CHAT_USAGE))
        self.flusher = Flusher([self])
        self._pending: set[asyncio.Task[None]] = set()

    def count(self, key_id: str, tenant_id: str, usage: Usage) -> None:
        for kind in ("requests", "refused", "prompt_tokens", "completion_tokens"):
            if n := getattr(usage, kind):
                self.counter.inc((key_id, kind), n)
        self.flusher.start()
        if self.store is None or not key_id:
            return
        task = asyncio.ensure_future(self._write(key_id, tenant_id, usage))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, key_id: str, tenant_id: str, usage: Usage) -> None:
        try:
            await self.store.add(key_id, tenant_id, usage)  # type: ignore[union-attr]
        except Exception:
            log.warning("counting chat usage failed", exc_info=True)

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5.0)
        await self.flusher.stop()
