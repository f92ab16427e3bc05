"""The dispatcher on a thread of its own, at a lower CPU priority: deliveries yield.

Deliveries are background work, and on a small box every CPU-ms the dispatcher spends
is taken from the request path (the ingress, retriever and embedder, and PostgreSQL's
backends serving them). On Linux a thread's nice value is its own (``setpriority`` on
the thread id), so the dispatcher's thread runs at ``MEMSERVE_WEBHOOKS_NICE``: under load
it gets the CPU the nice-0 work leaves, when idle all it wants, and the delivery lag
stays bounded because the writes leave idle time (they wait on commits); bench_events
measures both (docs/events.md). The Extractor's own work (extraction, consolidation) on
the replica's loop keeps its priority. The thread runs its own event loop, so it has a
small pool of its own (a pool belongs to one loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading

from serve_app.db.pool import open_pool
from serve_app.metrics import WebhookMetrics
from serve_app.settings import Settings
from serve_app.webhooks.dispatcher import Dispatcher

log = logging.getLogger(__name__)
POOL_MAX = 4  # the dispatcher's statements are short; its sends hold no connection
JOIN_S = 30.0  # a stop waits this long for sends in flight to be cancelled and closed


def thread_nice() -> int:
    """The calling thread's nice value (Linux: per thread)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def lower_priority(nice: int) -> int:
    """Raise the calling thread's nice value to ``nice`` (never the other way, which needs
    privileges); the value it has now. Elsewhere than Linux the value is per process, so
    it is left alone there (the replica's other work would yield too)."""
    if not sys.platform.startswith("linux"):
        return 0
    tid = threading.get_native_id()
    if nice > os.getpriority(os.PRIO_PROCESS, tid):
        os.setpriority(os.PRIO_PROCESS, tid, min(nice, 19))
    return os.getpriority(os.PRIO_PROCESS, tid)


class DispatcherThread:
    """A :class:`Dispatcher` run by its own thread (the surface the Extractor uses:
    ``start``, ``stop``, ``metrics``); ``interval_s`` 0 never starts it."""

    def __init__(self, dsn: str, settings: Settings, metrics: WebhookMetrics | None = None):
        self.dsn, self.settings = dsn, settings
        self.metrics = metrics or WebhookMetrics()
        self.nice: int | None = None  # the thread's nice value once it runs
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    def start(self) -> DispatcherThread:
        if self._thread is None and self.settings.webhooks.interval_s > 0:
            self._thread = threading.Thread(
                target=self._main, name="webhook-dispatcher", daemon=True
            )
            self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self.nice = lower_priority(self.settings.webhooks.nice)
        except OSError:
            log.warning("could not lower the webhook dispatcher's priority", exc_info=True)
        try:
            asyncio.run(self._serve())
        except Exception:
            log.exception("the webhook dispatcher thread failed")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        small = min(POOL_MAX, self.settings.db.pool_max)
        db = self.settings.db.model_copy(update={"pool_max": small})
        pool = await open_pool(self.dsn, self.settings.model_copy(update={"db": db}), min_size=1)
        dispatcher = Dispatcher.from_settings(pool, self.settings.webhooks, self.metrics)
        try:
            dispatcher.start()
            self._ready.set()
            await self._stop.wait()
        finally:
            await dispatcher.stop()
            await pool.close()

    async def stop(self) -> None:
        """Stop the thread's dispatcher (sends in flight are cancelled: their leases bring
        them back) and wait for the thread."""
        thread = self._thread
        if thread is None:
            return
        await asyncio.to_thread(self._ready.wait, JOIN_S)  # its loop runs (or it failed)
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: it ended
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join, JOIN_S)
        self._thread = None
