"""Periodic: the shared background loop of the tracker, purger, flushers and consolidation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from serve_app.periodic import Periodic

log = logging.getLogger("test.periodic")


async def test_ticks_go_on_after_a_failing_tick(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    async def tick() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("boom")

    p = Periodic(tick, 0.01, log=log, failed="tick failed")
    p.start()
    p.start()  # idempotent: still one loop
    assert p.running
    for _ in range(200):
        if len(calls) >= 3:
            break
        await asyncio.sleep(0.01)
    await p.stop()
    assert not p.running
    assert len(calls) >= 3
    assert [r.message for r in caplog.records if r.name == "test.periodic"] == ["tick failed"]
    n = len(calls)
    await asyncio.sleep(0.05)
    assert len(calls) == n  # stopped: no more ticks


async def test_stop_runs_a_final_sync_tick_even_if_never_started() -> None:
    calls: list[str] = []
    p = Periodic(lambda: calls.append("tick"), 0, log=log, failed="tick failed")
    p.start()  # interval 0: never starts
    assert not p.running
    await p.stop()
    assert calls == []
    await p.stop(final_tick=True)
    assert calls == ["tick"]


async def test_a_failing_final_tick_does_not_fail_stop() -> None:
    def tick() -> None:
        raise RuntimeError("down")

    p = Periodic(tick, 60, log=log, failed="tick failed")
    p.start()
    await p.stop(final_tick=True)
    assert not p.running


def test_start_without_a_running_loop_raises() -> None:
    with pytest.raises(RuntimeError):
        Periodic(lambda: None, 1, log=log, failed="x").start()
