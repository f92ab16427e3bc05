"""The worker's loop paces its turns: no busy loop while a switch settles."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.reembed.worker import Reembedder, Sleep, Turn
from serve_app.settings import ReembedSettings


class Scripted(Reembedder):
    """Returns the scripted turns, then stops the loop."""

    def __init__(self, turns: list[Turn], sleep: Sleep) -> None:
        super().__init__("unused", embed=None, settings=ReembedSettings(poll_s=5.0), sleep=sleep)  # type: ignore[arg-type]
        self.turns = turns

    async def run_once(self, *, max_batches: int | None = None) -> Turn:
        if not self.turns:
            raise asyncio.CancelledError
        return self.turns.pop(0)


async def test_pauses_between_turns() -> None:
    slept: list[float] = []

    async def record(seconds: float) -> None:  # injected: asyncio.sleep stays untouched
        slept.append(seconds)

    turns: list[Turn] = ["switched", "settling", "settling", "settled", "idle", "partial"]
    with pytest.raises(asyncio.CancelledError):
        await Scripted(turns, record).run()
    assert slept == [0.0, 1.0, 1.0, 5.0, 5.0, 0.0]


async def test_paces_batches_to_the_rate_on_the_injected_clock() -> None:
    now, slept = [100.0], []

    async def advance(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    worker = Reembedder(
        "unused",
        embed=None,  # type: ignore[arg-type]
        settings=ReembedSettings(rate_per_s=10.0),
        sleep=advance,
        clock=lambda: now[0],
    )
    await worker._pace(5)  # noqa: SLF001  the first batch starts at once
    await worker._pace(5)  # noqa: SLF001  5 texts at 10/s: half a second later
    now[0] += 2.0  # idle for a while: no debt carried over
    await worker._pace(5)  # noqa: SLF001
    assert slept == [0.5]
