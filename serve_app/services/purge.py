"""Periodic housekeeping: purge expired memories in bounded batches, prune erasure records.

Every Ingress replica runs a :class:`Purger`; a session-level advisory lock lets one
of them work per round, so replicas never delete the same rows twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from psycopg_pool import AsyncConnectionPool

from serve_app.settings import LifecycleSettings
from serve_app.store import erasure
from serve_app.store.forget import ForgetStore

log = logging.getLogger(__name__)
_LOCK = 0x6D656D70  # "memp": one purger at a time across replicas


class Purger:
    def __init__(self, pool: AsyncConnectionPool, store: ForgetStore, s: LifecycleSettings) -> None:
        self.pool = pool
        self.store = store
        self.s = s
        self._task: asyncio.Task | None = None
        self.purged = 0

    async def run_once(self) -> int:
        """One round: expired memories (bounded) and old erasure records; -1: another
        replica holds the lock."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%(k)s) AS ok", {"k": _LOCK})
            if not (await cur.fetchone())["ok"]:
                return -1
            try:
                n = await self.store.purge_expired(
                    batch=self.s.purge_batch, max_batches=self.s.purge_max_batches
                )
                await erasure.prune(conn, self.s.erasure_keep_s)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": _LOCK})
        self.purged += n
        if n:
            log.info("purged %d expired memories", n)
        return n

    def start(self) -> Purger:
        if self._task is None and self.s.purge_interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.s.purge_interval_s)
            try:
                await self.run_once()
            except Exception:
                log.warning("purging expired memories failed", exc_info=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
