"""The dispatcher on its own thread (as the Extractor runs it): it delivers over real
HTTP from a real PostgreSQL, at the lowered nice value on its own thread only, and
stops with its thread."""

from __future__ import annotations

import asyncio
import threading

from serve_app.settings import Settings, WebhookSettings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.testing.webhook_receiver import Receiver
from serve_app.webhooks.worker import DispatcherThread, lower_priority, thread_nice
from tests.serve_app.store.unit_vectors import DIM, vecs
from tests.serve_app.webhooks.test_dispatcher import subscribe, verified


def nice_of(tid: int) -> int:
    """The nice value of thread ``tid`` of this process, from /proc (field 19)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


async def test_thread_delivers_at_a_lower_priority_and_stops(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    receiver = Receiver().start()
    s = Settings(
        webhooks=WebhookSettings(interval_s=0.05, allowed_networks=["127.0.0.1/32"], nice=7)
    )
    before = thread_nice()
    worker = DispatcherThread(fresh_db, s).start()
    try:
        sub = await subscribe(pool, receiver.url("/ok"))
        await GuardedWriter(pool, "test").add(Owner("t1", "alice"), [NewMemory("hi")], vecs(1))
        for _ in range(200):
            if receiver.at("/ok"):
                break
            await asyncio.sleep(0.05)
        (body,) = verified(receiver.at("/ok"), sub["secret"])
        assert body["data"]["content"] == "hi"
        assert worker.metrics.counts["delivered"] == 1
        thread = worker._thread
        assert thread is not None and thread.native_id is not None
        assert worker.nice == nice_of(thread.native_id) == max(7, before)
        assert thread_nice() == before  # the caller's thread (the replica's loop) keeps its
    finally:
        await worker.stop()
        receiver.stop()
    assert not thread.is_alive()


async def test_off_never_starts(fresh_db):
    worker = DispatcherThread(fresh_db, Settings(webhooks=WebhookSettings(interval_s=0))).start()
    assert worker._thread is None
    await worker.stop()


def test_lower_priority_only_raises_the_nice_value():
    got: list[int] = []

    def run() -> None:  # a thread of its own: this one's value is left as it was
        start = thread_nice()
        got.extend([lower_priority(start + 2), lower_priority(start), start])

    t = threading.Thread(target=run)
    t.start()
    t.join()
    raised, kept, start = got
    assert raised == kept == min(start + 2, 19)
