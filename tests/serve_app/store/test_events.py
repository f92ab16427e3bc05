"""The event outbox against a real PostgreSQL (no Ray): one event per committed change,
none for a rolled-back one, a resumable feed that never skips a late commit, reconcile's
why, forget and retention."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from serve_app.store import NewMemory, Owner, history
from serve_app.store.events import Cursor, EventStore
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import GuardedWriter
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM, vecs

A = Owner("t1", "alice")
B = Owner("t1", "bob")


@pytest.fixture
async def db(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return pool


async def feed(events: EventStore, tenant: str = "t1", **kw) -> list[dict]:
    """Every settled event of the tenant, read a page of 2 at a time (the cursor path)."""
    out, cursor = [], Cursor()
    while True:
        page = await events.page(tenant, cursor, limit=2, **kw)
        if not page:
            return out
        out.extend(page)
        cursor = Cursor(page[-1]["txid"], page[-1]["id"])


async def test_each_committed_change_yields_one_event(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    rows = await writer.add(A, [NewMemory("likes tea"), NewMemory("lives in Oslo")], vecs(2))
    tea, oslo = rows[0]["id"], rows[1]["id"]
    await writer.update(A, tea, {"content": "likes green tea"}, vecs(1)[0])
    await writer.update(A, oslo, {"status": "archived"}, None)
    await writer.delete(A, tea)
    assert await writer.upsert_fact(A, "food", "drink", "tea", 0.9) == "added"
    assert await writer.upsert_fact(A, "food", "drink", "tea", 0.9) == "confirmed"  # no change
    assert await writer.upsert_fact(A, "food", "drink", "coffee", 0.95) == "replaced"
    assert await writer.delete_facts(A, "food") == 2

    got = await feed(events, include_content=True)
    assert [(e["type"], e["memory_id"]) for e in got] == [
        ("memory.added", tea),
        ("memory.added", oslo),
        ("memory.updated", tea),
        ("memory.archived", oslo),
        ("memory.deleted", tea),
        ("fact.set", None),
        ("fact.set", None),
        ("fact.deleted", None),
    ]
    assert len({e["event_id"] for e in got}) == len(got)
    assert all(e["user_id"] == "alice" and e["occurred_at"] is not None for e in got)
    # A deleted memory's events lose their content, as its history does; facts likewise.
    assert [e["content"] for e in got] == [
        None,
        "lives in Oslo",
        None,
        "lives in Oslo",
        None,
        None,
        None,
        None,
    ]
    assert got[1]["version"] == 1 and got[3]["version"] == 2
    assert got[7]["data"]["category"] == "food" and got[7]["data"]["key"] == "drink"
    # Content only on request.
    assert "content" not in (await events.page("t1", Cursor(), limit=10))[0]


async def test_a_rolled_back_change_yields_none(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    with pytest.raises(RuntimeError):
        async with db.connection() as conn, conn.transaction():
            await writer.add(A, [NewMemory("doomed")], vecs(1), conn=conn)
            await writer.upsert_fact(A, "x", "y", "z", 0.9, conn=conn)
            raise RuntimeError("abort")
    assert await feed(events) == []
    await writer.add(A, [NewMemory("kept")], vecs(1))
    assert [e["type"] for e in await feed(events)] == ["memory.added"]


async def test_feed_holds_back_until_earlier_transactions_end(db):
    """A transaction that began first but commits last is not skipped by a reader that
    already read past the later one's events."""
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    async with db.connection() as slow:
        await slow.execute("BEGIN")
        # (a fact: two adds of one tenant would queue on its memory count row)
        await writer.upsert_fact(A, "pace", "speed", "slow", 0.9, conn=slow)  # uncommitted
        await writer.add(B, [NewMemory("fast")], vecs(1))  # commits first
        assert await feed(events) == []  # held back: the slow one may still commit
        await slow.execute("COMMIT")
    got = await feed(events, include_content=True)
    assert [e["content"] for e in got] == ["slow", "fast"]
    # Resuming after the last one returns nothing new, then only what follows.
    last = Cursor(got[-1]["txid"], got[-1]["id"])
    assert await events.page("t1", last, limit=10) == []
    await writer.add(B, [NewMemory("later")], vecs(1))
    assert [e["user_id"] for e in await events.page("t1", last, limit=10)] == ["bob"]
    assert [e["user_id"] for e in await feed(events, user_id="bob")] == ["bob", "bob"]
    assert await feed(events, "t2") == []  # another tenant sees none of it


async def test_reconcile_reason_rides_on_the_event(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    async with db.connection() as conn, conn.transaction():
        row = (await writer.add(A, [NewMemory("likes tea")], vecs(1), conn=conn))[0]
        await history.annotate(conn, "t1", row["id"], {"decision": "ADD", "reason": "new"})
    (event,) = await feed(events)
    assert (event["decision"], event["reason"]) == ("ADD", "new")


async def test_forget_leaves_one_notice_without_content(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    await writer.add(A, [NewMemory("alice's secret")], vecs(1))
    await writer.upsert_fact(A, "home", "city", "Oslo", 0.9)
    await writer.add(B, [NewMemory("bob's note")], vecs(1))
    counts = await ForgetStore(db, "test").forget(Scope("t1", "alice"))
    assert counts["events"] == 2
    got = await feed(events, include_content=True)
    assert [(e["type"], e["user_id"]) for e in got] == [
        ("memory.added", "bob"),
        ("forget.completed", "alice"),
    ]
    notice = got[1]
    assert notice["content"] is None and notice["memory_id"] is None
    assert notice["data"]["memories"] == 1 and notice["data"]["facts"] == 1
    # Nothing of alice's anywhere in the table, the notice aside.
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM memory_events WHERE user_id = 'alice'"
            " AND (type <> 'forget.completed' OR content IS NOT NULL)"
        )
        assert (await cur.fetchone())["n"] == 0


async def test_expiry_emits_one_memory_deleted_per_memory_and_blanks_content(db):
    writer, events, forget = GuardedWriter(db, "test"), EventStore(db), ForgetStore(db, "test")
    past, later = datetime.now(UTC) - timedelta(seconds=1), datetime.now(UTC) + timedelta(hours=1)
    old = await writer.add(
        A, [NewMemory(f"alice old {i}", expires_at=past) for i in range(3)], vecs(3)
    )
    (kept,) = await writer.add(A, [NewMemory("alice kept", expires_at=later)], vecs(1))
    (bob,) = await writer.add(Owner("t2", "bob"), [NewMemory("bob old", expires_at=past)], vecs(1))
    assert await forget.purge_expired(batch=2, max_batches=5) == 4  # chunks of 2, two tenants
    assert await forget.purge_expired(batch=2, max_batches=5) == 0  # nothing twice

    got = await feed(events, include_content=True)
    deleted = [e for e in got if e["type"] == "memory.deleted"]
    assert sorted(e["memory_id"] for e in deleted) == sorted(r["id"] for r in old)
    assert all(
        e["data"] == {"reason": "expired"}
        and e["actor"] == "expiry"
        and e["user_id"] == "alice"
        and e["content"] is None
        for e in deleted
    )
    added = {e["memory_id"]: e["content"] for e in got if e["type"] == "memory.added"}
    assert added == {**{r["id"]: None for r in old}, kept["id"]: "alice kept"}  # blanked
    (bob_event,) = [e for e in await feed(events, "t2") if e["type"] == "memory.deleted"]
    assert (bob_event["memory_id"], bob_event["user_id"]) == (bob["id"], "bob")


async def test_newest_first_pages_backwards(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    for i in range(5):
        await writer.add(A, [NewMemory(f"n{i}")], vecs(1))
    oldest_first = [e["event_id"] for e in await feed(events)]
    got, cursor = [], Cursor()
    while page := await events.page("t1", cursor, limit=2, newest=True):
        got.extend(e["event_id"] for e in page)
        cursor = Cursor(page[-1]["txid"], page[-1]["id"])
    assert got == oldest_first[::-1] and len(got) == 5


async def test_prune_drops_only_events_past_retention_in_batches(db):
    writer, events = GuardedWriter(db, "test"), EventStore(db)
    await writer.add(A, [NewMemory(f"m{i}") for i in range(5)], vecs(5))
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE memory_events SET occurred_at = now() - interval '2 days'"
            " WHERE id IN (SELECT id FROM memory_events ORDER BY id LIMIT 3)"
        )
        assert await events.prune(conn, 86400, batch=2, max_batches=1) == 2  # bounded
        assert await events.prune(conn, 86400, batch=2, max_batches=5) == 1
    assert len(await feed(events)) == 2


def test_cursor_round_trips_and_refuses_junk():
    assert Cursor.parse(Cursor(12, 34).token()) == Cursor(12, 34)
    assert Cursor.parse(None) == Cursor()
    # past xid8 (2**64) or bigint (2**63): PostgreSQL's cast would fail; other digits
    top = (f"{2**64}-1", f"1-{2**63}", "99999999999999999999999-1", "\u0663-1", "1-\u00b9")
    assert Cursor.parse(f"{2**64 - 1}-{2**63 - 1}") == Cursor(2**64 - 1, 2**63 - 1)
    for junk in ("x", "1-", "-1", "1-2-3", "1;2", "9" * 50 + "-1", str(uuid.uuid4()), *top):
        with pytest.raises(ValueError):
            Cursor.parse(junk)


async def test_extraction_outcomes_are_events_one_per_session(db):
    turns, events = TurnStore(db), EventStore(db)
    done, tried, dead = (SessionKey("t1", "alice", s) for s in ("s1", "s2", "s3"))
    for key in (done, tried, dead):
        await turns.append(key, [("user", "a"), ("assistant", "b")], agent_id=None, ttl_hours=1)

    async def ids(key: SessionKey) -> list[int]:
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM session_turns WHERE session_id = %s", [key.session_id]
            )
            return [r["id"] for r in await cur.fetchall()]

    assert await turns.mark_extracted(await ids(done)) == 2
    await turns.fail(
        await ids(tried), claim=None, error="LLM 503", max_attempts=3, retry_after_s=30
    )
    await turns.fail(
        await ids(dead), claim=None, error="bad JSON", max_attempts=1, retry_after_s=30
    )
    await turns.release(await ids(tried))  # a release changes no outcome: no event
    got = [(e["type"], e["session_id"], e["data"]["turns"]) for e in await feed(events)]
    assert got == [
        ("extraction.completed", "s1", 2),
        ("extraction.deferred", "s2", 2),
        ("extraction.failed", "s3", 2),
    ]
    failed = (await feed(events, types=["extraction.failed"]))[0]
    assert failed["data"]["error"] == "bad JSON" and failed["user_id"] == "alice"
