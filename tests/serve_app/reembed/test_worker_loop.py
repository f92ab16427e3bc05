"""The worker's loop paces its turns: no busy loop while a switch settles."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.reembed import worker as worker_mod
from serve_app.reembed.worker import Reembedder, Turn
from serve_app.settings import ReembedSettings


class Scripted(Reembedder):
    """Returns the scripted turns, then stops the loop."""

    def __init__(self, turns: list[Turn]) -> None:
        super().__init__("unused", embed=None, settings=ReembedSettings(poll_s=5.0))  # type: ignore[arg-type]
        self.turns = turns

    async def run_once(self, *, max_batches: int | None = None) -> Turn:
        if not self.turns:
            raise asyncio.CancelledError
        return self.turns.pop(0)


async def test_pauses_between_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(worker_mod.asyncio, "sleep", record)
    turns: list[Turn] = ["switched", "settling", "settling", "settled", "idle", "partial"]
    with pytest.raises(asyncio.CancelledError):
        await Scripted(turns).run()
    assert slept == [0.0, 1.0, 1.0, 5.0, 5.0, 0.0]
