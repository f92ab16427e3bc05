"""Runs extraction in the background of an extractor replica, fairly.

Sessions wait in a :class:`FairQueue`: round-robin over tenants, and within a
tenant over users, so one user's (or tenant's) flood of sessions cannot delay
everyone else. ``concurrency`` workers take sessions from it; a tenant never has
more than ``tenant_concurrency`` runs (hence LLM calls) in flight. One run per
session at a time: a trigger that arrives during a run schedules exactly one more
run (at the back of the queue). State is bounded: at most ``max_queued`` sessions
wait in memory (more are left to the periodic scan of the durable queue, which
catches anything a lost trigger, an LLM outage or a restart left behind), and
``last_outcome`` keeps the newest ``max_outcomes`` results.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque

from serve_app.extraction.pipeline import ExtractionPipeline, Outcome
from serve_app.store.turns import SessionKey

log = logging.getLogger(__name__)
MAX_OUTCOMES = 1000


class FairQueue:
    """Session keys by tenant, then user; :meth:`pop` rotates over both."""

    def __init__(self) -> None:
        self._tenants: OrderedDict[str, OrderedDict[str, deque[SessionKey]]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, key: SessionKey) -> None:
        users = self._tenants.setdefault(key.tenant_id, OrderedDict())
        users.setdefault(key.user_id, deque()).append(key)
        self._size += 1

    def pop(self, busy: set[str]) -> SessionKey | None:
        """The next session of the first tenant not in ``busy``; that tenant and user
        go to the back of their rotations."""
        for tenant in list(self._tenants):
            if tenant in busy:
                continue
            users = self._tenants[tenant]
            user, sessions = next(iter(users.items()))
            key = sessions.popleft()
            if sessions:
                users.move_to_end(user)
            else:
                del users[user]
            if users:
                self._tenants.move_to_end(tenant)
            else:
                del self._tenants[tenant]
            self._size -= 1
            return key
        return None


class SessionScheduler:
    def __init__(
        self,
        pipeline: ExtractionPipeline,
        concurrency: int,
        *,
        tenant_concurrency: int | None = None,
        max_queued: int = 10_000,
    ) -> None:
        self.pipeline = pipeline
        self.concurrency = max(1, concurrency)
        self.tenant_cap = max(1, tenant_concurrency or self.concurrency)
        self.max_queued = max(1, max_queued)
        self._queue = FairQueue()
        self._futures: dict[SessionKey, asyncio.Future[Outcome | None]] = {}
        self._force: dict[SessionKey, bool] = {}
        self._running: dict[SessionKey, str] = {}  # key -> tenant
        self._again: dict[SessionKey, bool] = {}
        self._partial: dict[SessionKey, Outcome] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._scanner: asyncio.Task[None] | None = None
        self.last_outcome: OrderedDict[SessionKey, Outcome] = OrderedDict()
        self.dropped = 0  # triggers left to the durable scan (queue full)

    def submit(self, key: SessionKey, force: bool = False) -> asyncio.Future[Outcome | None]:
        """Schedule a run for the session; returns a future covering this trigger."""
        future = self._futures.get(key)
        if future is not None:
            if key in self._running:
                self._again[key] = self._again.get(key, False) or force
            else:
                self._force[key] = self._force.get(key, False) or force
            return future
        future = asyncio.get_running_loop().create_future()
        if len(self._queue) >= self.max_queued:
            self.dropped += 1  # its turns are in PostgreSQL: the scan finds them
            future.set_result(None)
            return future
        self._futures[key] = future
        self._force[key] = force
        self._queue.push(key)
        self._ensure_workers()
        return future

    def _ensure_workers(self) -> None:
        self._wake.set()
        while len(self._workers) < self.concurrency:
            task = asyncio.create_task(self._worker(), name="extract-worker")
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    def _busy_tenants(self) -> set[str]:
        per: dict[str, int] = {}
        for tenant in self._running.values():
            per[tenant] = per.get(tenant, 0) + 1
        return {t for t, n in per.items() if n >= self.tenant_cap}

    async def _worker(self) -> None:
        while True:
            key = self._queue.pop(self._busy_tenants())
            if key is None:
                if not self._queue and not self._running:
                    return  # idle: workers are started again by the next submit
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._run(key, self._force.pop(key, False))
            self._wake.set()

    async def _run(self, key: SessionKey, force: bool) -> None:
        self._running[key] = key.tenant_id
        outcome = self._partial.pop(key, None)
        try:
            result = await self.pipeline.process_session(key, force=force)
            outcome = result if outcome is None else outcome.merge(result)
            self._remember(key, outcome)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let one session's failure kill the replica
            log.exception("extraction of %s failed", key)
        finally:
            del self._running[key]
        if key in self._again:  # triggered during the run: once more, at the back
            self._force[key] = self._again.pop(key)
            if outcome is not None:
                self._partial[key] = outcome
            self._queue.push(key)
            return
        future = self._futures.pop(key, None)
        if future is not None and not future.done():
            future.set_result(outcome)

    def _remember(self, key: SessionKey, outcome: Outcome) -> None:
        self.last_outcome[key] = outcome
        self.last_outcome.move_to_end(key)
        while len(self.last_outcome) > MAX_OUTCOMES:
            self.last_outcome.popitem(last=False)

    async def drain(self) -> None:
        """Wait until nothing is queued or running (tests, graceful shutdown)."""
        while self._futures:
            await asyncio.gather(*list(self._futures.values()), return_exceptions=True)

    async def scan_once(self) -> int:
        """Submit every due session of the durable queue; returns how many."""
        keys = await self.pipeline.scan()
        for key in keys:
            self.submit(key)
        return len(keys)

    def start_scanning(self, interval_s: float) -> None:
        async def loop() -> None:
            while True:
                try:
                    await self.scan_once()
                except Exception:
                    log.exception("scan of pending turns failed")
                await asyncio.sleep(interval_s)

        if self._scanner is None:
            self._scanner = asyncio.create_task(loop(), name="extract-scan")

    async def stop(self) -> None:
        """Cancel the scan and the running work, and wait for them to end: nothing of the
        scheduler runs once this returns."""
        scanner, self._scanner = self._scanner, None
        workers = [*([scanner] if scanner is not None else []), *self._workers]
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for future in self._futures.values():
            if not future.done():
                future.cancel()
        self._futures.clear()

    @property
    def in_flight(self) -> int:
        """Sessions queued or running."""
        return len(self._futures)

    @property
    def running(self) -> int:
        return len(self._running)
