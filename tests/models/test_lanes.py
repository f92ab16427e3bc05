"""The Embedder's two lanes (models/lanes.py) without Ray: interactive callers go before
queued bulk slices, a slice never starts while one waits (until it is overdue), results
come back in the caller's order, a cancelled bulk caller's remaining slices never run,
and the slicing limits hold. Time is a fake clock and sleep, injected."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.batching import padded_tokens
from models.lanes import EncoderLanes, plan_slices


class FakeTime:
    """A clock that moves only when the lanes sleep (by exactly what they asked)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s
        await asyncio.sleep(0)


async def never(_s: float) -> None:
    """A sleep that does not end (the lanes cancel it when woken otherwise)."""
    await asyncio.Event().wait()


class Observer:
    def __init__(self) -> None:
        self.slices: list[tuple[float, bool]] = []
        self.behind = 0

    def bulk_slice(self, waited_s: float, overdue: bool) -> None:
        self.slices.append((waited_s, overdue))

    def interactive_behind_bulk(self) -> None:
        self.behind += 1


async def spin(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def bulk_runner(
    lanes: EncoderLanes, log: list, hold: dict[int, asyncio.Event] | None = None
) -> Callable[[list[int]], Awaitable[np.ndarray]]:
    """An encoder run of a slice as the Embedder's: counted from the call, then held
    until its event is set (``hold``, by slice number) or one loop turn."""
    count = 0

    async def run(rows: list[int]) -> np.ndarray:
        nonlocal count
        k, count = count, count + 1
        lanes.run_started()
        log.append(("bulk", k))
        try:
            if hold is not None and k in hold:
                await hold[k].wait()
            else:
                await asyncio.sleep(0)
        finally:
            lanes.run_ended()
            log.append(("bulk done", k))
        return np.array([[float(i), float(i) * 2] for i in rows], dtype=np.float32)

    return run


async def interactive_caller(lanes: EncoderLanes, log: list, name: str) -> None:
    """An interactive embed: inside from arrival, runs once the encoder is free."""
    with lanes.interactive():
        while lanes.running:
            await asyncio.sleep(0)
        lanes.run_started()
        log.append((name, "run"))
        await asyncio.sleep(0)
        lanes.run_ended()


def slices_of(n: int) -> list[list[int]]:
    return [[i] for i in range(n)]


async def test_results_come_back_in_the_callers_order():
    lanes = EncoderLanes(1.0, clock=FakeTime().clock, sleep=never)
    lengths = [30, 5, 12, 5, 40, 1, 22]
    slices = plan_slices(lengths, max_tokens=40, max_texts=2)
    assert sorted(i for s in slices for i in s) == list(range(7))
    out = await lanes.run_bulk(7, slices, bulk_runner(lanes, []), dim=2)
    assert out.shape == (7, 2) and out.dtype == np.float32
    assert out[:, 0].tolist() == [float(i) for i in range(7)]
    assert out[:, 1].tolist() == [2.0 * i for i in range(7)]
    assert lanes.slices_run == len(slices) and lanes.running == 0


async def test_a_slice_never_starts_while_an_interactive_caller_is_inside():
    observer = Observer()
    lanes = EncoderLanes(5.0, observer=observer, clock=FakeTime().clock, sleep=never)
    log: list = []
    with lanes.interactive():  # e.g. parked at the gate or in the batch queue
        bulk = asyncio.ensure_future(lanes.run_bulk(2, slices_of(2), bulk_runner(lanes, log), 2))
        await spin()
        assert log == [] and not bulk.done()
    await bulk  # the caller left: the slices run
    assert [e for e in log if e[0] == "bulk"] == [("bulk", 0), ("bulk", 1)]
    assert [overdue for _, overdue in observer.slices] == [False, False]


async def test_interactive_callers_jump_ahead_of_queued_bulk_slices():
    observer = Observer()
    lanes = EncoderLanes(5.0, observer=observer, clock=FakeTime().clock, sleep=never)
    log: list = []
    first = asyncio.Event()
    run = bulk_runner(lanes, log, hold={0: first})
    bulk = asyncio.ensure_future(lanes.run_bulk(3, slices_of(3), run, 2))
    await spin()
    assert log == [("bulk", 0)]  # slice 0 computes
    # Two interactive callers arrive while it computes: they wait for it, not for the rest.
    callers = [asyncio.ensure_future(interactive_caller(lanes, log, n)) for n in ("a", "b")]
    await spin()
    assert observer.behind == 2
    first.set()
    await asyncio.gather(bulk, *callers)
    order = [e for e in log if e[0] != "bulk done"]
    assert order[:3] == [("bulk", 0), ("a", "run"), ("b", "run")]
    assert order[3:] == [("bulk", 1), ("bulk", 2)]


async def test_the_max_wait_lets_bulk_progress_under_constant_interactive_load():
    t, observer = FakeTime(), Observer()
    lanes = EncoderLanes(0.5, observer=observer, clock=t.clock, sleep=t.sleep)
    log: list = []
    with lanes.interactive():  # an interactive caller is always inside
        out = await lanes.run_bulk(3, slices_of(3), bulk_runner(lanes, log), 2)
    assert out[:, 0].tolist() == [0.0, 1.0, 2.0]
    assert [overdue for _, overdue in observer.slices] == [True, True, True]
    assert all(waited >= 0.5 for waited, _ in observer.slices)
    assert t.now == pytest.approx(1.5)  # one max wait per slice, no more
    assert lanes.overdue_slices == 3


async def test_an_overdue_slice_still_waits_for_the_run_computing():
    t = FakeTime()
    lanes = EncoderLanes(0.1, clock=t.clock, sleep=t.sleep)
    log: list = []
    with lanes.interactive():
        lanes.run_started()  # an interactive batch computes
        bulk = asyncio.ensure_future(lanes.run_bulk(1, slices_of(1), bulk_runner(lanes, log), 2))
        await spin()
        assert log == [] and t.slept == []  # waits for the run's end, not a deadline
        lanes.run_ended()
        await bulk
    assert log[0] == ("bulk", 0)


async def test_cancelling_a_bulk_caller_stops_its_remaining_slices():
    lanes = EncoderLanes(1.0, clock=FakeTime().clock, sleep=never)
    log: list = []
    first = asyncio.Event()
    bulk = asyncio.ensure_future(
        lanes.run_bulk(4, slices_of(4), bulk_runner(lanes, log, hold={0: first}), 2)
    )
    await spin()
    assert log == [("bulk", 0)]
    bulk.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bulk
    first.set()
    await spin()
    assert [e for e in log if e[0] == "bulk"] == [("bulk", 0)]  # 1, 2, 3 never ran
    assert lanes.running == 0 and not lanes.bulk_running
    # The lane is free for the next bulk caller.
    out = await lanes.run_bulk(2, slices_of(2), bulk_runner(lanes, []), 2)
    assert out.shape == (2, 2)


async def test_a_bulk_caller_cancelled_while_waiting_runs_nothing():
    lanes = EncoderLanes(1.0, clock=FakeTime().clock, sleep=never)
    log: list = []
    with lanes.interactive():
        bulk = asyncio.ensure_future(lanes.run_bulk(2, slices_of(2), bulk_runner(lanes, log), 2))
        await spin()
        bulk.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bulk
    await spin()
    assert log == [] and lanes.slices_run == 0


async def test_two_bulk_callers_take_turns_slice_by_slice():
    lanes = EncoderLanes(1.0, clock=FakeTime().clock, sleep=never)
    log_a: list = []
    log_b: list = []
    order: list[str] = []

    def tagged(name: str, log: list) -> Callable[[list[int]], Awaitable[np.ndarray]]:
        run = bulk_runner(lanes, log)

        async def go(rows: list[int]) -> np.ndarray:
            order.append(name)
            return await run(rows)

        return go

    await asyncio.gather(
        lanes.run_bulk(3, slices_of(3), tagged("a", log_a), 2),
        lanes.run_bulk(3, slices_of(3), tagged("b", log_b), 2),
    )
    assert order == ["a", "b", "a", "b", "a", "b"]


def test_a_negative_max_wait_is_refused():
    with pytest.raises(ValueError):
        EncoderLanes(-1.0)


@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=80),
    max_tokens=st.integers(16, 4096),
    max_texts=st.integers(1, 40),
)
def test_slices_respect_the_token_and_text_limits(lengths, max_tokens, max_texts):
    slices = plan_slices(lengths, max_tokens=max_tokens, max_texts=max_texts)
    assert sorted(i for s in slices for i in s) == list(range(len(lengths)))
    for s in slices:
        assert 1 <= len(s) <= max_texts
        if len(s) > 1:  # a text longer than the cap gets a slice of its own
            assert padded_tokens(lengths, [s]) <= max_tokens
    # Length-sorted: every slice's texts are no longer than the next slice's.
    for a, b in zip(slices, slices[1:], strict=False):
        assert max(lengths[i] for i in a) <= min(lengths[i] for i in b)
