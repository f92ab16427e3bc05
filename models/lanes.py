"""Who runs on the encoder next: interactive callers first, bulk work in small slices.

One encoder (one replica's CPUs or GPU) serves two kinds of caller. Interactive ones (a
memory write's one embedding, a query) wait on the encoder with a user waiting on them.
Bulk ones (a document's hundreds of chunks, a re-embed, an import) have no one waiting
on any particular text. Run a bulk list as one encoder run and every interactive caller
that arrives meanwhile waits for all of it: on 2 CPUs a 64-chunk slice of a PDF held a
memory write's p50 at 2.5 s instead of 27 ms (``loadtests/bench_documents.py``).

So bulk lists are cut into slices (:func:`plan_slices`: length-sorted, capped in padded
tokens and texts) and each slice takes its turn (:meth:`EncoderLanes.run_bulk`): it
starts only when no encoder run computes and no interactive caller is inside (waiting at
the Embedder's gate, in its batch queue, or running). An interactive caller then waits
at most for one slice. Bulk is not starved: a slice that has waited ``max_wait_s`` runs
as soon as the encoder is free, interactive callers or not, so a bulk job still moves
one slice per ``max_wait_s`` under constant interactive load. Bulk callers take turns
slice by slice (a FIFO lock), so two tenants' documents progress together.

Plain asyncio, no Ray: the Embedder deployment counts its callers and runs here; the
clock and the sleep are injected so tests drive time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from models.batching import plan_batches

__all__ = ["EncoderLanes", "LaneObserver", "plan_slices"]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[object]]
RunSlice = Callable[[list[int]], Awaitable[np.ndarray]]


class LaneObserver(Protocol):
    """Where the lanes report (the Embedder's metrics)."""

    def bulk_slice(self, waited_s: float, overdue: bool) -> None: ...

    def interactive_behind_bulk(self) -> None: ...


def plan_slices(lengths: Sequence[int], *, max_tokens: int, max_texts: int) -> list[list[int]]:
    """Indices of a bulk list cut into slices, shortest texts first: each slice at most
    ``max_tokens`` padded tokens (rows x longest; a text longer than that alone) and at
    most ``max_texts`` texts (:func:`models.batching.plan_batches`)."""
    return plan_batches(lengths, max_batch_tokens=max_tokens, max_batch_size=max_texts)


class EncoderLanes:
    """The encoder's two lanes (see the module docstring).

    The owner calls :meth:`run_started`/:meth:`run_ended` around every encoder run (both
    lanes) and wraps each interactive caller in :meth:`interactive`; bulk lists go
    through :meth:`run_bulk`.
    """

    def __init__(
        self,
        max_wait_s: float,
        *,
        observer: LaneObserver | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        self.max_wait_s = max_wait_s
        self.observer = observer
        self.clock = clock
        self.sleep = sleep
        self.running = 0  # encoder runs computing now (either lane)
        self.interactive_callers = 0  # interactive callers inside: waiting or running
        self.bulk_running = False  # the run computing now is a bulk slice
        self.slices_run = 0
        self.overdue_slices = 0
        self._changed = asyncio.Event()  # set (and replaced) whenever a turn may be free
        self._bulk_turns = asyncio.Lock()  # one bulk slice waits/runs at a time, FIFO

    # ---------- what the owner reports ----------

    @contextlib.contextmanager
    def interactive(self) -> Iterator[None]:
        """An interactive caller, from its arrival until it has its vectors: while any is
        inside, no bulk slice starts (unless overdue)."""
        self.interactive_callers += 1
        if self.bulk_running and self.observer is not None:
            self.observer.interactive_behind_bulk()
        try:
            yield
        finally:
            self.interactive_callers -= 1
            if not self.interactive_callers:
                self._wake()

    def run_started(self) -> None:
        self.running += 1

    def run_ended(self) -> None:
        self.running -= 1
        if not self.running:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ---------- bulk ----------

    async def run_bulk(
        self, n: int, slices: Sequence[list[int]], run: RunSlice, dim: int
    ) -> np.ndarray:
        """Vectors of ``n`` texts, in the caller's order: ``run(rows)`` embeds the texts at
        ``rows`` (one slice) and must mark its run started before its first await.
        Cancelled, the slices not yet started never run."""
        out = np.zeros((n, dim), dtype=np.float32)
        for rows in slices:
            async with self._bulk_turns:
                await self._turn()
                self.bulk_running = True
                try:
                    out[rows] = np.asarray(await run(list(rows)), dtype=np.float32)
                finally:
                    self.bulk_running = False
        return out

    async def _turn(self) -> None:
        """Wait until this slice may start: the encoder free and no interactive caller
        inside, or the encoder free and ``max_wait_s`` waited (then it goes anyway)."""
        started = self.clock()
        while True:
            waited = self.clock() - started
            if not self.running:
                overdue = waited >= self.max_wait_s
                if not self.interactive_callers or overdue:
                    self._count(waited, overdue=bool(self.interactive_callers))
                    return
            # Interactive callers only (encoder idle between their runs): wake at the
            # deadline too; otherwise a run's end or the last caller's exit wakes us.
            deadline = None if self.running else max(self.max_wait_s - waited, 0.0)
            await self._wait(deadline)

    def _count(self, waited: float, *, overdue: bool) -> None:
        self.slices_run += 1
        self.overdue_slices += overdue
        if self.observer is not None:
            self.observer.bulk_slice(waited, overdue)

    async def _wait(self, timeout: float | None) -> None:
        """Until the next wake-up, or ``timeout`` seconds by the injected sleep."""
        changed = self._changed
        if timeout is None:
            await changed.wait()
            return
        waiter = asyncio.ensure_future(changed.wait())
        sleeper = asyncio.ensure_future(self.sleep(timeout))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, sleeper):
                task.cancel()
            await asyncio.gather(waiter, sleeper, return_exceptions=True)
