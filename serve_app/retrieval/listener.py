"""LISTEN on the store's change channel and drop stale cache entries eagerly.

Correctness does not depend on it (every search compares versions with the
database); it frees memory early and makes a replica's next search for a changed
owner skip the stale entry without the check failing first. Reconnects forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

import psycopg

from serve_app.store.memories import CHANGES_CHANNEL

log = logging.getLogger(__name__)

OnChange = Callable[[str, str, int], object]


class ChangeListener:
    def __init__(self, dsn: str, on_change: OnChange, *, retry_s: float = 1.0) -> None:
        self.dsn = dsn
        self.on_change = on_change
        self.retry_s = retry_s
        self.received = 0
        self._task: asyncio.Task | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {CHANGES_CHANNEL}")
                    self.connected.set()
                    async for note in conn.notifies():
                        self._handle(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # outage: keep trying, the version check covers us
                self.connected.clear()
                log.warning("change listener disconnected (%s); retrying", exc)
                await asyncio.sleep(self.retry_s)

    def _handle(self, payload: str) -> None:
        try:
            tenant_id, owner, version = json.loads(payload)
        except (ValueError, TypeError):
            return
        self.received += 1
        self.on_change(str(tenant_id), str(owner), int(version))
