"""Fair scheduling of extraction runs: round-robin over tenants and users, a per-tenant
cap on runs in flight, bounded in-memory state.

The queue is plain data; the scheduler is driven with a pipeline stand-in whose runs
block until the test releases them, so the order and the concurrency are exact (the
real pipeline under the scheduler is covered in test_pipeline.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from serve_app.extraction.outcome import Outcome
from serve_app.extraction.scheduler import MAX_OUTCOMES, FairQueue, SessionScheduler
from serve_app.store.turns import SessionKey


def key(tenant: str, user: str, session: str) -> SessionKey:
    return SessionKey(tenant, user, session)


def drain(queue: FairQueue, busy: set[str] | None = None) -> list[SessionKey]:
    out = []
    while (k := queue.pop(busy or set())) is not None:
        out.append(k)
    return out


# ---------- FairQueue ----------


def test_round_robin_over_tenants_then_users():
    q = FairQueue()
    for i in range(3):
        q.push(key("A", "a1", f"s{i}"))  # tenant A floods through one user first
    q.push(key("A", "a2", "s0"))
    q.push(key("B", "b1", "s0"))
    q.push(key("B", "b2", "s0"))
    assert len(q) == 6
    order = [(k.tenant_id, k.user_id, k.session_id) for k in drain(q)]
    assert order == [
        ("A", "a1", "s0"),
        ("B", "b1", "s0"),
        ("A", "a2", "s0"),  # a1 went to the back of A's users
        ("B", "b2", "s0"),
        ("A", "a1", "s1"),
        ("A", "a1", "s2"),
    ]
    assert len(q) == 0 and q.pop(set()) is None


def test_a_flooding_user_does_not_starve_others():
    q = FairQueue()
    for i in range(1000):
        q.push(key("T", "flood", f"s{i}"))
    q.push(key("T", "normal", "s0"))
    q.push(key("U", "other", "s0"))
    first = drain(q)[:3]
    assert {k.user_id for k in first} == {"flood", "normal", "other"}


def test_busy_tenants_are_skipped_not_lost():
    q = FairQueue()
    q.push(key("A", "a", "s0"))
    q.push(key("A", "a", "s1"))
    q.push(key("B", "b", "s0"))
    assert q.pop({"A"}) == key("B", "b", "s0")
    assert q.pop({"A"}) is None  # only A's sessions left, and A is at its cap
    assert len(q) == 2
    assert drain(q) == [key("A", "a", "s0"), key("A", "a", "s1")]


def test_state_is_released_when_empty():
    q = FairQueue()
    for t in range(50):
        for u in range(5):
            q.push(key(f"t{t}", f"u{u}", "s"))
    assert len(drain(q)) == 250
    assert len(q) == 0 and not q._tenants  # no empty tenants or users left behind


# ---------- SessionScheduler ----------


class GatedPipeline:
    """Runs block until released; records start order and concurrency per tenant."""

    def __init__(self) -> None:
        self.started: list[SessionKey] = []
        self.gates: dict[SessionKey, asyncio.Event] = {}
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.auto = False  # release every run at once

    async def process_session(self, k: SessionKey, *, force: bool = False) -> Outcome:
        self.started.append(k)
        self.active[k.tenant_id] += 1
        self.peak[k.tenant_id] = max(self.peak[k.tenant_id], self.active[k.tenant_id])
        self.peak_total = max(self.peak_total, sum(self.active.values()))
        try:
            if not self.auto:
                await self.gates.setdefault(k, asyncio.Event()).wait()
            else:
                await asyncio.sleep(0)
        finally:
            self.active[k.tenant_id] -= 1
        return Outcome(turns_extracted=1)

    def release_all(self) -> None:
        self.auto = True
        for gate in list(self.gates.values()):
            gate.set()

    async def scan(self) -> list[SessionKey]:
        return []


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_flooding_tenant_stays_under_its_cap_and_others_run():
    pipe = GatedPipeline()
    sched = SessionScheduler(pipe, concurrency=4, tenant_concurrency=2)  # type: ignore[arg-type]
    flood = [sched.submit(key("flood", f"u{i % 3}", f"s{i}")) for i in range(30)]
    await settle()
    assert pipe.active["flood"] == 2 and sched.running == 2  # its cap, not the 4 workers
    normal = sched.submit(key("quiet", "alice", "s0"))
    await settle()
    assert pipe.active["quiet"] == 1, "the quiet tenant runs at once, beside the flood"
    pipe.gates[key("quiet", "alice", "s0")].set()
    assert (await asyncio.wait_for(normal, 2)).turns_extracted == 1
    assert pipe.active["flood"] == 2  # the flood is still held at its cap
    pipe.release_all()
    results = await asyncio.wait_for(asyncio.gather(*flood), 5)
    assert all(r.turns_extracted == 1 for r in results)
    assert pipe.peak["flood"] == 2 and pipe.peak_total <= 4
    assert len(pipe.started) == 31 and len(set(pipe.started)) == 31
    assert sched.in_flight == 0 and sched.running == 0
    await sched.stop()


async def test_runs_rotate_over_users_within_a_tenant():
    pipe = GatedPipeline()
    pipe.auto = True
    sched = SessionScheduler(pipe, concurrency=1)  # type: ignore[arg-type]
    futures = [sched.submit(key("T", "flood", f"s{i}")) for i in range(10)]
    futures.append(sched.submit(key("T", "normal", "s0")))
    await asyncio.wait_for(asyncio.gather(*futures), 5)
    users = [k.user_id for k in pipe.started]
    assert users.index("normal") <= 1, users  # not behind the flood's 10 sessions
    await sched.stop()


async def test_queue_is_bounded_and_overflow_is_left_to_the_scan():
    pipe = GatedPipeline()
    sched = SessionScheduler(pipe, concurrency=1, max_queued=5)  # type: ignore[arg-type]
    futures = [sched.submit(key("T", "u", f"s{i}")) for i in range(20)]
    await settle()
    dropped = [f for f in futures if f.done()]
    assert sched.dropped == len(dropped) > 0
    assert all(f.result() is None for f in dropped)  # nothing ran for them
    assert sched.in_flight <= 5 + 1  # queued plus the one running
    pipe.release_all()
    await asyncio.wait_for(sched.drain(), 5)
    assert len(pipe.started) == 20 - sched.dropped
    await sched.stop()


async def test_a_trigger_during_a_run_runs_once_more_not_twice_in_parallel():
    pipe = GatedPipeline()
    sched = SessionScheduler(pipe, concurrency=4)  # type: ignore[arg-type]
    k = key("T", "u", "s")
    first = sched.submit(k)
    await settle()
    again = [sched.submit(k) for _ in range(5)]
    assert all(f is first for f in again)  # one future covers every trigger
    await settle()
    assert pipe.active["T"] == 1
    pipe.release_all()
    outcome = await asyncio.wait_for(first, 5)
    assert pipe.started == [k, k] and outcome.turns_extracted == 2  # exactly one re-run
    await sched.stop()


@pytest.mark.parametrize("n", [MAX_OUTCOMES + 50])
async def test_last_outcomes_are_bounded(n):
    pipe = GatedPipeline()
    pipe.auto = True
    sched = SessionScheduler(pipe, concurrency=8)  # type: ignore[arg-type]
    await asyncio.wait_for(
        asyncio.gather(*(sched.submit(key("T", f"u{i}", "s")) for i in range(n))), 30
    )
    assert len(sched.last_outcome) == MAX_OUTCOMES
    assert key("T", f"u{n - 1}", "s") in sched.last_outcome  # newest kept, oldest dropped
    assert key("T", "u0", "s") not in sched.last_outcome
    await sched.stop()
