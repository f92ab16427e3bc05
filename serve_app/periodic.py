"""One background task that runs a tick every interval on the running event loop.

Access counters, the purger, metric flushers and periodic consolidation all need the
same small loop: sleep, tick, log a failed tick and go on, cancel on stop. It lives
here once so each of them says only what its tick does.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable

Tick = Callable[[], Awaitable[object] | object]


class Periodic:
    """Calls ``tick`` (sync or async) every ``interval_s`` seconds until stopped.

    A tick that raises is logged on ``log`` with ``failed`` and the loop goes on: one
    lost round must not stop the housekeeping for the life of the replica.
    """

    def __init__(
        self,
        tick: Tick,
        interval_s: float,
        *,
        log: logging.Logger,
        failed: str,
        level: int = logging.WARNING,
    ) -> None:
        self.tick, self.interval_s = tick, interval_s
        self.log, self.failed, self.level = log, failed, level
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start on the running loop (idempotent; an interval <= 0 never starts).

        Raises RuntimeError without a running loop, as ``asyncio.get_running_loop``."""
        if self._task is None and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def run_tick(self) -> None:
        result = self.tick()
        if inspect.isawaitable(result):
            await result

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_tick()
            except Exception:
                self.log.log(self.level, self.failed, exc_info=True)

    async def stop(self, *, final_tick: bool = False) -> None:
        """Cancel the loop and wait for it; ``final_tick`` runs one more tick (best
        effort: shutdown must not fail on it), whether or not the loop had started."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if final_tick:
            with contextlib.suppress(Exception):
                await self.run_tick()
