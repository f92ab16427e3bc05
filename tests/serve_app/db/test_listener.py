"""Stopping a NotifyListener never waits on a connection that no longer answers."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from serve_app.db.listener import NotifyListener


async def test_stop_abandons_a_task_wedged_on_a_frozen_backend(fresh_db):
    heard: list[str] = []
    listener = NotifyListener(fresh_db, "memserve_test_stop", heard.append, stale_s=60, ping_s=60)
    listener.start()
    await asyncio.wait_for(listener.connected.wait(), 10)
    pid = listener.backend_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # the socket stays open, nothing answers
    try:
        started = time.monotonic()
        await listener.stop(timeout_s=1.0)
        assert time.monotonic() - started < 3.0
        assert not listener.connected.is_set()
    finally:
        os.kill(pid, signal.SIGCONT)
