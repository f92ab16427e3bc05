"""A dispatcher in its own OS process, SIGKILLed mid-delivery, loses nothing.

Real PostgreSQL, a real receiver on 127.0.0.1 that answers slowly (so the kill lands
while a request is open and after some were delivered but not yet recorded), and the
dispatcher as a separate process (``serve_app/testing/dispatcher_process.py``). After a
restart every event arrives, in order per owner; the ones sent again carry the same
``webhook-id`` as the first time, and the delivery log ends all delivered.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from standardwebhooks import Webhook

from serve_app.services.webhooks import WebhookService
from serve_app.settings import WebhookSettings
from serve_app.store import NewMemory, Owner
from serve_app.store.events import Cursor, EventStore
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.store.webhooks import WebhookStore
from serve_app.testing.webhook_receiver import Receiver
from tests.serve_app.store.unit_vectors import DIM, vecs

OWNERS = [Owner("t1", u) for u in ("alice", "bob", "carol")]
PER_OWNER = 8
ENV = {
    "MEMSERVE_WEBHOOKS_INTERVAL_S": "0.1",
    "MEMSERVE_WEBHOOKS_TIMEOUT_S": "1.0",  # lease: 2 x 1 + 5 = 7 s
    "MEMSERVE_WEBHOOKS_ALLOWED_NETWORKS": '["127.0.0.1/32"]',
}


@pytest.fixture
def receiver():
    r = Receiver(hang_s=0.25).start()
    yield r
    r.stop()


def spawn(dsn: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "serve_app.testing.dispatcher_process", dsn],
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def wait_for(check: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


async def test_sigkill_mid_delivery_loses_nothing(fresh_db, pool, receiver):
    ensure_table(fresh_db, "test", DIM)
    writer = GuardedWriter(pool, "test")
    svc = WebhookService(WebhookStore(pool), WebhookSettings(allowed_networks=["127.0.0.1/32"]))
    sub = await svc.create("t1", receiver.url("/hang"), [], True, True)
    for owner in OWNERS:
        for i in range(PER_OWNER):
            await writer.add(owner, [NewMemory(f"{owner.user_id} {i}")], vecs(1))
    events = await EventStore(pool).page("t1", Cursor(), limit=500, include_content=True)
    assert len(events) == len(OWNERS) * PER_OWNER

    first = spawn(fresh_db)
    try:
        wait_for(lambda: len(receiver.received) >= 6, 30)  # some sent, one per owner open
    finally:
        first.kill()  # SIGKILL: no cleanup, claims stay leased, marks unwritten
        first.wait(10)
    assert first.returncode == -9
    killed_at = len(receiver.received)
    assert killed_at < len(events)  # it died mid-way

    receiver.hang_s = 0.0
    second = spawn(fresh_db)
    try:

        def ids() -> set[str]:
            return {r.headers["webhook-id"] for r in receiver.received}

        wait_for(lambda: len(ids()) == len(events), 40)  # after the 7 s leases ran out

        async def settled() -> bool:
            log = await WebhookStore(pool).deliveries("t1", sub["id"], status=None, limit=100)
            return len(log) == len(events) and all(d["status"] == "delivered" for d in log)

        end = time.monotonic() + 10
        while not await settled():
            assert time.monotonic() < end, "the delivery log never settled"
            await asyncio.sleep(0.1)
    finally:
        second.terminate()
        second.wait(10)

    hook = Webhook(sub["secret"])
    bodies = [(r.headers["webhook-id"], hook.verify(r.body, r.headers)) for r in receiver.received]
    assert all(wid == body["data"]["id"] for wid, body in bodies)  # same id on every send
    sent = [wid for wid, _ in bodies]
    assert len(sent) > len(set(sent))  # the kill left sends to redo: duplicates happened
    assert sorted(set(sent)) == sorted(str(e["event_id"]) for e in events)  # nothing lost
    for owner in OWNERS:  # in order per owner (first arrivals)
        mine = [str(e["event_id"]) for e in events if e["user_id"] == owner.user_id]
        got = [wid for wid, body in bodies if body["data"]["user_id"] == owner.user_id]
        assert list(dict.fromkeys(got)) == mine
