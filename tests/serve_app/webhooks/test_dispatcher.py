"""Webhook delivery against a real receiver over HTTP on 127.0.0.1 and a real PostgreSQL
(no Ray): down-then-back delivers everything in order per owner with valid Standard
Webhooks signatures; a dispatcher stopped mid-send loses nothing (the redelivery has
the same webhook-id); a hanging or 50 MB receiver does not hold up another
subscription; dead letters replay; SSRF targets are refused; a forget drops the
owner's pending deliveries."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from serve_app.services.webhooks import WebhookService
from serve_app.settings import WebhookSettings
from serve_app.store import NewMemory, Owner
from serve_app.store.events import Cursor, EventStore
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from serve_app.store.webhooks import WebhookStore
from serve_app.testing.webhook_receiver import Receiver
from serve_app.webhooks.dispatcher import RECLAIM_S, Dispatcher
from serve_app.webhooks.sender import PAYLOAD_FIELDS, Sender
from serve_app.webhooks.ssrf import Refused, TargetGuard
from tests.serve_app.store.unit_vectors import DIM, vecs

A, B = Owner("t1", "alice"), Owner("t1", "bob")
LOOPBACK = ["127.0.0.1/32"]


def settings(**kw) -> WebhookSettings:
    base = {
        "interval_s": 0,
        "timeout_s": 1.0,
        "backoff_s": 0.05,
        "max_backoff_s": 0.2,
        "allowed_networks": LOOPBACK,
    }
    return WebhookSettings(**{**base, **kw})


@pytest.fixture
async def db(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return pool


@pytest.fixture
def receiver():
    r = Receiver(hang_s=3.0).start()
    yield r
    r.stop()


def dispatcher(pool, s: WebhookSettings) -> Dispatcher:
    sender = Sender(
        TargetGuard(s.allowed_networks),
        timeout_s=s.timeout_s,
        max_response_bytes=s.max_response_bytes,
    )
    return Dispatcher(WebhookStore(pool), sender, s, jitter=lambda: 0.5)


async def until(d: Dispatcher, done: Callable[[], bool], rounds: int = 200) -> None:
    """Rounds (sends awaited between them) until ``done``; fails after ``rounds``."""
    for _ in range(rounds):
        await d.run_once()
        await asyncio.sleep(0.05)
        if done():
            return
    raise AssertionError("not done in time")


async def subscribe(pool, url: str, **kw) -> dict:
    svc = WebhookService(WebhookStore(pool), settings())
    args = {"types": [], "include_content": True, "enabled": True} | kw
    return await svc.create("t1", url, args["types"], args["include_content"], args["enabled"])


async def all_events(pool) -> list[dict]:
    return await EventStore(pool).page("t1", Cursor(), limit=500, include_content=True)


def verified(received, secret: str) -> list[dict]:
    """Bodies whose signature checks out with standardwebhooks (raises otherwise)."""
    hook = Webhook(secret)
    return [hook.verify(r.body, r.headers) for r in received]


async def test_receiver_down_then_back_gets_everything_in_order(db):
    writer = GuardedWriter(db, "test")
    down = Receiver()
    down.start()
    port = down.port
    down.stop()  # the port is closed: connection refused
    sub = await subscribe(db, f"http://127.0.0.1:{port}/ok")
    rows = await writer.add(A, [NewMemory("a1"), NewMemory("a2")], vecs(2))
    await writer.add(B, [NewMemory("b1")], vecs(1))
    await writer.update(A, rows[0]["id"], {"content": "a1 v2"}, vecs(1)[0])
    await writer.upsert_fact(B, "k", "v", "x", 0.9)
    d = dispatcher(db, settings(max_attempts=50))
    try:
        for _ in range(5):  # failing while down: retried, not lost
            await d.run_once()
            await d.drain()
        assert d.metrics.counts["failed"] >= 2 and d.metrics.counts["delivered"] == 0
        back = Receiver(port=port).start()
        try:
            await until(d, lambda: len({r.headers["webhook-id"] for r in back.received}) == 5)
            await d.drain()
            bodies = verified(back.received, sub["secret"])
        finally:
            back.stop()
    finally:
        await d.stop()
    expected = await all_events(db)
    seen = {}
    for body in bodies:
        seen.setdefault(body["data"]["id"], body)
    assert sorted(seen) == sorted(str(e["event_id"]) for e in expected)
    for user in ("alice", "bob"):  # in order per owner
        mine = [str(e["event_id"]) for e in expected if e["user_id"] == user]
        got = [b["data"]["id"] for b in bodies if b["data"]["user_id"] == user]
        assert list(dict.fromkeys(got)) == mine
    contents = [b["data"]["content"] for b in bodies if b["data"]["user_id"] == "alice"]
    assert contents == ["a1", "a2", "a1 v2"]  # what each change wrote
    assert {b["type"] for b in bodies} == {"memory.added", "memory.updated", "fact.set"}


async def test_stopped_mid_send_is_sent_again_with_the_same_id(db, receiver):
    writer = GuardedWriter(db, "test")
    sub = await subscribe(db, receiver.url("/hang"))
    await writer.add(A, [NewMemory("once")], vecs(1))
    s = settings(timeout_s=5.0)
    first = dispatcher(db, s)
    await first.run_once()
    await until(first, lambda: len(receiver.at("/hang")) == 1)
    await first.stop()  # dies mid-send: nothing recorded, the claim stays leased
    async with db.connection() as conn:  # the lease runs out (as it would after 2*timeout+5)
        await conn.execute("UPDATE webhook_deliveries SET next_at = now()")
    receiver.hang_s = 0
    second = dispatcher(db, s)
    try:
        await until(second, lambda: len(receiver.at("/hang")) == 2)
        await second.drain()
    finally:
        await second.stop()
    ids = [r.headers["webhook-id"] for r in receiver.at("/hang")]
    assert ids[0] == ids[1]
    assert [b["data"]["content"] for b in verified(receiver.at("/hang"), sub["secret"])] == [
        "once",
        "once",
    ]
    log = await WebhookStore(db).deliveries("t1", sub["id"], status=None, limit=10)
    assert [(x["status"], x["attempts"]) for x in log] == [("delivered", 1)]


async def test_hanging_and_huge_receivers_do_not_hold_up_others(db, receiver):
    writer = GuardedWriter(db, "test")
    hang = await subscribe(db, receiver.url("/hang"))
    huge = await subscribe(db, receiver.url("/huge"))
    await subscribe(db, receiver.url("/ok"), include_content=False)
    for user in ("u1", "u2", "u3"):
        await writer.add(Owner("t1", user), [NewMemory(f"{user} m")], vecs(1))
    d = dispatcher(db, settings(timeout_s=2.5))
    try:
        await until(d, lambda: len(receiver.at("/ok")) == 3)
        # The good one is done while the hanging one's sends are still open.
        assert d.in_flight(hang["id"]) > 0
        await until(d, lambda: d.in_flight(huge["id"]) == 0 and len(receiver.at("/huge")) == 3)
    finally:
        await d.stop()
    assert all(json.loads(r.body)["data"].get("content") is None for r in receiver.at("/ok"))
    log = await WebhookStore(db).deliveries("t1", huge["id"], status="delivered", limit=10)
    assert len(log) == 3  # 200 with 50 MB: read 64 KiB of it, delivered


async def test_dead_letters_replay(db, receiver):
    writer = GuardedWriter(db, "test")
    sub = await subscribe(db, receiver.url("/fail"))
    await writer.add(A, [NewMemory("x")], vecs(1))
    store = WebhookStore(db)
    d = dispatcher(db, settings(max_attempts=2))
    try:
        await until(d, lambda: d.metrics.counts["dead"] == 1)
        await d.drain()
        (dead,) = await store.deliveries("t1", sub["id"], status="dead", limit=10)
        assert dead["attempts"] == 2 and dead["last_status"] == 500
        svc = WebhookService(store, settings())
        (state,) = await svc.list("t1")  # the delivery state the console shows
        assert (state["pending"], state["dead"], state["lag_s"]) == (0, 1, None)
        assert state["last_delivered_at"] is None
        await svc.update("t1", sub["id"], {"url": receiver.url("/ok")})
        assert await svc.replay("t1", sub["id"]) == 1
        await until(d, lambda: len(receiver.at("/ok")) == 1)
        await d.drain()
    finally:
        await d.stop()
    log = await store.deliveries("t1", sub["id"], status=None, limit=10)
    assert [x["status"] for x in log] == ["delivered"]
    (state,) = await WebhookService(store, settings()).list("t1")
    assert (state["pending"], state["dead"]) == (0, 0) and state["last_delivered_at"]


async def test_ssrf_targets_are_refused():
    guard = TargetGuard()
    for url in (
        "http://127.0.0.1/x",
        "http://localhost:8000/",
        "http://10.0.0.5/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://0.0.0.0/",
        "http://192.168.1.1/",
        "file:///etc/passwd",
        "ftp://example.com/",
        "http://user:pw@example.com/",
        "http:///nohost",
    ):
        with pytest.raises(Refused):
            await guard.check(url)
    await TargetGuard(LOOPBACK).check("http://127.0.0.1:9/x")  # the operator allowed it
    with pytest.raises(Refused):
        await TargetGuard(LOOPBACK).check("http://10.0.0.5/")


async def test_ssrf_refused_at_send_time_too(db, receiver):
    writer = GuardedWriter(db, "test")
    sub = await subscribe(db, receiver.url("/ok"))  # allowed when made
    await writer.add(A, [NewMemory("x")], vecs(1))
    d = dispatcher(db, settings(allowed_networks=[], max_attempts=1))
    try:
        await until(d, lambda: d.metrics.counts["dead"] == 1)
        await d.drain()
    finally:
        await d.stop()
    assert receiver.received == []
    (log,) = await WebhookStore(db).deliveries("t1", sub["id"], status=None, limit=10)
    assert log["last_error"].startswith("refused:")


async def test_forget_drops_the_owners_pending_deliveries(db, receiver):
    writer = GuardedWriter(db, "test")
    sub = await subscribe(db, receiver.url("/ok"))
    await writer.add(A, [NewMemory("alice secret")], vecs(1))
    await writer.add(B, [NewMemory("bob note")], vecs(1))
    store = WebhookStore(db)
    await store.fan_out(sub["id"], 100)  # queued, not yet sent
    await ForgetStore(db, "test").forget(Scope("t1", "alice"))
    d = dispatcher(db, settings())
    try:
        await until(d, lambda: len(receiver.at("/ok")) == 2)
        await d.drain()
    finally:
        await d.stop()
    bodies = verified(receiver.at("/ok"), sub["secret"])
    got = sorted((b["type"], b["data"]["user_id"], b["data"].get("content")) for b in bodies)
    assert got == [("forget.completed", "alice", None), ("memory.added", "bob", "bob note")]
    assert all(b"alice secret" not in r.body for r in receiver.received)


def event_row(url: str) -> dict:
    """A claimed delivery as the sender gets it (store/webhooks.py's claim)."""
    return {
        "event_id": uuid.uuid4(),
        "type": "memory.added",
        "occurred_at": datetime.now(UTC),
        "secret": "whsec_" + base64.b64encode(b"k" * 24).decode(),
        "url": url,
        "include_content": True,
        "content": "c",
    } | dict.fromkeys(PAYLOAD_FIELDS)


async def test_a_name_is_resolved_through_the_guard_on_connect(receiver):
    """A host name (not an IP literal) is checked by the connector's resolver: refused
    when it resolves to loopback, sent when the operator allows loopback."""
    url = f"http://localhost:{receiver.port}/ok"
    refusing = Sender(TargetGuard(), timeout_s=2.0, max_response_bytes=1024)
    try:
        answer = await refusing.send(event_row(url))
    finally:
        await refusing.aclose()
    assert not answer.ok and answer.error.startswith("refused:") and receiver.received == []
    allowing = Sender(
        TargetGuard(["127.0.0.1/32", "::1/128"]), timeout_s=2.0, max_response_bytes=1024
    )
    try:
        rows = [event_row(url), event_row(url)]
        answers = [await allowing.send(r) for r in rows]
    finally:
        await allowing.aclose()
    assert [a.status for a in answers] == [204, 204]
    assert [r.headers["webhook-id"] for r in receiver.at("/ok")] == [
        str(r["event_id"]) for r in rows
    ]
    assert verified(receiver.at("/ok"), rows[0]["secret"])[0]["data"]["content"] == "c"


class CountingStore(WebhookStore):
    """The real store, counting the round's claims (how often a round scans pending)."""

    claims = 0

    async def claim(self, *args, **kw):
        self.claims += 1
        return await super().claim(*args, **kw)


async def test_a_short_claim_is_not_repeated_every_round(db, receiver):
    writer = GuardedWriter(db, "test")
    await subscribe(db, receiver.url("/hang"))
    receiver.hang_s = 1.0  # alice's chain stays in flight meanwhile
    await writer.add(A, [NewMemory("a1"), NewMemory("a2")], vecs(2))
    now = [0.0]
    s = settings(timeout_s=5.0)
    store = CountingStore(db)
    sender = Sender(
        TargetGuard(s.allowed_networks),
        timeout_s=s.timeout_s,
        max_response_bytes=s.max_response_bytes,
    )
    d = Dispatcher(store, sender, s, jitter=lambda: 0.5, clock=lambda: now[0])
    try:
        assert await d.run_once() == 1  # queued 2, claimed alice's first: short of 8
        assert await d.run_once() == 0 and store.claims == 1  # a2 is due, not claimable
        now[0] += RECLAIM_S
        assert await d.run_once() == 0 and store.claims == 2  # looked again after a while
        await d.drain()  # the chain sends a2 after a1
    finally:
        await d.stop()
    assert [json.loads(r.body)["data"]["content"] for r in receiver.at("/hang")] == ["a1", "a2"]
