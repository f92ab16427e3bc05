"""LISTEN on one PostgreSQL channel over a dedicated connection, reconnecting forever.

Notifications sent while the connection was down are lost, so ``healthy`` tells
users whether they may trust what the notifications keep fresh, and ``on_connect``
runs after every (re)connection so they can drop what they might have missed.
A connection can also die silently (a dropped route, a frozen server): TCP
keepalives make the kernel notice within seconds, and the listener pings its
connection every ``ping_s``; ``healthy`` turns false once nothing has been heard
for ``stale_s``, whatever the socket believes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import psycopg

log = logging.getLogger(__name__)

# libpq TCP keepalives: first probe after 5 s idle, then every 2 s, dead after 3 misses.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}


class NotifyListener:
    def __init__(
        self,
        dsn: str,
        channel: str,
        on_payload: Callable[[str], object],
        *,
        on_connect: Callable[[], object] | None = None,
        retry_s: float = 1.0,
        ping_s: float = 1.0,
        stale_s: float = 3.0,
    ) -> None:
        self.dsn = dsn
        self.channel = channel
        self.on_payload = on_payload
        self.on_connect = on_connect
        self.retry_s = retry_s
        self.ping_s = ping_s
        self.stale_s = stale_s
        self.received = 0
        self.connected = asyncio.Event()
        self.heard = 0.0  # monotonic time of the last ping answer or notification
        self.backend_pid: int | None = None
        self._task: asyncio.Task | None = None

    def healthy(self) -> bool:
        """Connected and heard from within ``stale_s``: notifications can be trusted."""
        return self.connected.is_set() and time.monotonic() - self.heard < self.stale_s

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self, timeout_s: float = 5.0) -> bool:
        """Cancel the listening task; a task wedged on a dead connection is abandoned
        after ``timeout_s`` (shutdown must not wait on a backend that never answers).
        False: it was abandoned."""
        stopped = True
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
            if not done:
                stopped = False
                log.warning(
                    "listener on %s did not stop in %.0f s; abandoned", self.channel, timeout_s
                )
            self._task = None
        self.connected.clear()
        return stopped

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                self.connected.clear()
                raise
            except Exception as exc:  # outage: keep trying
                self.connected.clear()
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # stop() cancelled us and psycopg turned the cancel into an error (a
                    # connect or read on a frozen backend): stop, do not retry for ever.
                    raise asyncio.CancelledError from exc
                log.warning("listener on %s disconnected (%s); retrying", self.channel, exc)
                await asyncio.sleep(self.retry_s)

    async def _listen(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=max(2, int(self.stale_s)), **KEEPALIVES
        )
        async with conn:
            await conn.execute(f"LISTEN {self.channel}")
            self.backend_pid = conn.info.backend_pid
            if self.on_connect is not None:
                self.on_connect()
            self.heard = time.monotonic()
            self.connected.set()
            while True:
                async for note in conn.notifies(timeout=self.ping_s):
                    self.received += 1
                    self.heard = time.monotonic()
                    self.on_payload(note.payload)
                # No notification for ping_s: prove the connection still answers. Not
                # wait_for: on Python 3.11 it returns the result when the ping answers at
                # the moment stop() cancels, the cancel is lost and the loop pings on.
                async with asyncio.timeout(self.stale_s):
                    await conn.execute("SELECT 1")
                self.heard = time.monotonic()
