"""Runs extraction in the background of an extractor replica.

One run per session at a time (a trigger that arrives during a run schedules
exactly one more run, so turns appended meanwhile are not left behind), at most
``concurrency`` sessions in flight, and a periodic scan of the durable queue
(pending turns in PostgreSQL) that catches anything a lost trigger, an LLM
outage or a restart left behind.
"""

from __future__ import annotations

import asyncio
import logging

from serve_app.extraction.pipeline import ExtractionPipeline, Outcome
from serve_app.store.turns import SessionKey

log = logging.getLogger(__name__)


class SessionScheduler:
    def __init__(self, pipeline: ExtractionPipeline, concurrency: int) -> None:
        self.pipeline = pipeline
        self._sem = asyncio.Semaphore(max(1, concurrency))
        self._tasks: dict[SessionKey, asyncio.Task[Outcome | None]] = {}
        self._again: dict[SessionKey, bool] = {}
        self._scanner: asyncio.Task[None] | None = None
        self.last_outcome: dict[SessionKey, Outcome] = {}

    def submit(self, key: SessionKey, force: bool = False) -> asyncio.Task[Outcome | None]:
        """Schedule a run for the session; returns the task that will cover this trigger."""
        task = self._tasks.get(key)
        if task is not None and not task.done():
            self._again[key] = self._again.get(key, False) or force
            return task
        task = asyncio.create_task(self._run(key, force), name=f"extract:{key.session_id}")
        self._tasks[key] = task
        return task

    async def _run(self, key: SessionKey, force: bool) -> Outcome | None:
        outcome: Outcome | None = None
        try:
            while True:
                async with self._sem:
                    try:
                        result = await self.pipeline.process_session(key, force=force)
                        outcome = result if outcome is None else outcome.merge(result)
                        self.last_outcome[key] = outcome
                    except Exception:  # never let one session's failure kill the replica
                        log.exception("extraction of %s failed", key)
                if key not in self._again:
                    return outcome
                force = self._again.pop(key)
        finally:
            self._tasks.pop(key, None)

    async def drain(self) -> None:
        """Wait until no run is in flight (tests, graceful shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

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
        if self._scanner is not None:
            self._scanner.cancel()
            self._scanner = None
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)
