"""Periodic housekeeping: purge expired memories in bounded batches, prune erasure records
and events past their retention.

Every Ingress replica runs a :class:`Purger`; a session-level advisory lock lets one
of them work per round, so replicas never delete the same rows twice.
"""

from __future__ import annotations

import logging

from psycopg_pool import AsyncConnectionPool

from serve_app.periodic import Periodic
from serve_app.settings import LifecycleSettings
from serve_app.store import erasure
from serve_app.store.events import EventStore
from serve_app.store.forget import ForgetStore

log = logging.getLogger(__name__)
_LOCK = 0x6D656D70  # "memp": one purger at a time across replicas


class Purger:
    def __init__(self, pool: AsyncConnectionPool, store: ForgetStore, s: LifecycleSettings) -> None:
        self.pool = pool
        self.store = store
        self.s = s
        self._periodic = Periodic(
            self.run_once, s.purge_interval_s, log=log, failed="purging expired memories failed"
        )
        self.purged = 0
        self.events = EventStore(pool)
        self.pruned_events = 0

    async def run_once(self) -> int:
        """One round: expired memories (bounded) and old erasure records; -1: another
        replica holds the lock."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%(k)s) AS ok", {"k": _LOCK})
            if not (await cur.fetchone())["ok"]:
                return -1
            try:
                n = await self.store.purge_expired(
                    batch=self.s.purge_batch, max_batches=self.s.purge_max_batches, conn=conn
                )  # on the connection that holds the lock: one pool slot, not two
                await erasure.prune(conn, self.s.erasure_keep_s)
                if self.s.events_keep_s > 0:
                    self.pruned_events += await self.events.prune(
                        conn,
                        self.s.events_keep_s,
                        batch=self.s.purge_batch,
                        max_batches=self.s.purge_max_batches,
                    )
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%(k)s)", {"k": _LOCK})
        self.purged += n
        if n:
            log.info("purged %d expired memories", n)
        return n

    def start(self) -> Purger:
        self._periodic.start()
        return self

    async def stop(self) -> None:
        await self._periodic.stop()
