"""LISTEN on one PostgreSQL channel over a dedicated connection, reconnecting forever.

Notifications sent while the connection was down are lost, so ``connected`` tells
users whether they may trust what the notifications keep fresh, and ``on_connect``
runs after every (re)connection so they can drop what they might have missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg

log = logging.getLogger(__name__)


class NotifyListener:
    def __init__(
        self,
        dsn: str,
        channel: str,
        on_payload: Callable[[str], object],
        *,
        on_connect: Callable[[], object] | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.channel = channel
        self.on_payload = on_payload
        self.on_connect = on_connect
        self.retry_s = retry_s
        self.received = 0
        self.connected = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self.connected.clear()

    async def _run(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {self.channel}")
                    if self.on_connect is not None:
                        self.on_connect()
                    self.connected.set()
                    async for note in conn.notifies():
                        self.received += 1
                        self.on_payload(note.payload)
            except asyncio.CancelledError:
                self.connected.clear()
                raise
            except Exception as exc:  # outage: keep trying
                self.connected.clear()
                log.warning("listener on %s disconnected (%s); retrying", self.channel, exc)
                await asyncio.sleep(self.retry_s)
