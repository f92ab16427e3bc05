"""Validity (event time) in the store, against a real PostgreSQL: supersedes, retired
rows in lists (as_of, include_invalidated), the chain, history and facts' intervals."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.supersede import SupersedeRefused
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM, vecs

A = Owner("t1", "alice")
B = Owner("t1", "bob")
JAN = datetime(2026, 1, 1, tzinfo=UTC)
JUN = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
async def writer(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return GuardedWriter(pool, "test")


async def add(writer, owner, content, **kw):
    [row] = await writer.add(owner, [NewMemory(content=content, **kw)], vecs(1), actor="t")
    return row


def owner_version(dsn: str, owner: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT version FROM memory_owner_versions WHERE tenant_id = 't1' AND owner = %s",
            (owner,),
        ).fetchone()
    return row[0] if row else 0


async def test_supersedes_retires_in_the_same_write_and_shows_the_chain(writer, fresh_db):
    store = writer.memories
    paris = await add(writer, A, "The user lives in Paris", valid_from=JAN)
    before = owner_version(fresh_db, "alice")
    berlin = await add(
        writer, A, "The user lives in Berlin", valid_from=JUN, supersedes=[paris["id"]]
    )
    assert berlin["supersedes"] == [paris["id"]] and berlin["valid_from"] == JUN
    assert owner_version(fresh_db, "alice") == before + 1  # one statement, one bump
    old = await store.get(A, paris["id"])  # retired, never deleted
    assert old["valid_until"] == JUN and old["superseded_by"] == berlin["id"]
    assert old["version"] == paris["version"] + 1
    assert [e["event"] for e in await store.history(A, paris["id"], 1000)] == ["ADD", "INVALIDATE"]
    # Lists: valid now by default; as_of shows the past; include_invalidated everything.
    now, _ = await store.list(A, limit=10)
    assert [r["content"] for r in now] == ["The user lives in Berlin"]
    then, _ = await store.list(A, limit=10, as_of=datetime(2026, 3, 1, tzinfo=UTC))
    assert [r["content"] for r in then] == ["The user lives in Paris"]
    before_all, _ = await store.list(A, limit=10, as_of=JAN - timedelta(days=1))
    assert before_all == []
    audit, _ = await store.list(A, limit=10, include_invalidated=True)
    assert {r["content"] for r in audit} == {"The user lives in Paris", "The user lives in Berlin"}


async def test_supersedes_without_valid_from_retires_as_of_now(writer):
    old = await add(writer, A, "likes tea")
    new = await add(writer, A, "likes coffee", supersedes=[old["id"]])
    row = await writer.memories.get(A, old["id"])
    assert row["valid_until"] is not None and row["valid_until"] <= datetime.now(UTC)
    assert row["valid_until"] >= new["created_at"] - timedelta(seconds=1)


@pytest.mark.parametrize("case", ["unknown", "foreign", "retired", "repeated"])
async def test_bad_supersedes_target_writes_nothing(writer, fresh_db, case):
    store = writer.memories
    mine = await add(writer, A, "mine")
    bobs = await add(writer, B, "bob's")
    target, status = {
        "unknown": ([uuid.uuid4()], 404),
        "foreign": ([bobs["id"]], 404),  # another user's: indistinguishable from missing
        "retired": ([mine["id"]], 409),
        "repeated": ([mine["id"], mine["id"]], 422),
    }[case]
    if case == "retired":
        await add(writer, A, "newer", supersedes=[mine["id"]])
    rows_before, _ = await store.list(A, limit=50, include_invalidated=True)
    version_before = owner_version(fresh_db, "alice")
    items = [NewMemory(content="replacement", supersedes=target)]
    with pytest.raises(SupersedeRefused) as refused:
        await writer.add(A, items, vecs(1), actor="t")
    assert refused.value.status == status
    rows_after, _ = await store.list(A, limit=50, include_invalidated=True)
    assert len(rows_after) == len(rows_before)  # the replacement was not added
    assert owner_version(fresh_db, "alice") == version_before
    assert (await store.get(B, bobs["id"]))["valid_until"] is None
    if case != "retired":
        assert (await store.get(A, mine["id"]))["valid_until"] is None


async def test_a_batch_supersedes_across_items_atomically(writer):
    a = await add(writer, A, "plan: trip to Rome")
    b = await add(writer, A, "diet: vegan")
    items = [
        NewMemory(content="trip to Rome cancelled", supersedes=[a["id"]]),
        NewMemory(content="diet: vegetarian", supersedes=[b["id"]]),
    ]
    rows = await writer.add(A, items, vecs(2), actor="t")
    assert [r["supersedes"] for r in rows] == [[a["id"]], [b["id"]]]
    assert (await writer.memories.get(A, a["id"]))["superseded_by"] == rows[0]["id"]
    assert (await writer.memories.get(A, b["id"]))["superseded_by"] == rows[1]["id"]


async def test_patch_valid_until_retires_and_null_revives(writer):
    row = await add(writer, A, "works at Acme")
    retired = await writer.update(A, row["id"], {"valid_until": JUN}, None, event="INVALIDATE")
    assert retired["valid_until"] == JUN
    assert (await writer.memories.list(A, limit=10))[0] == []
    events = await writer.memories.history(A, row["id"], 1000)
    assert [e["event"] for e in events] == ["ADD", "INVALIDATE"]
    back = await writer.update(A, row["id"], {"valid_until": None, "superseded_by": None}, None)
    assert back["valid_until"] is None
    assert [r["id"] for r in (await writer.memories.list(A, limit=10))[0]] == [row["id"]]


async def test_a_future_valid_until_stays_valid_until_then(writer):
    row = await add(writer, A, "on parental leave")
    later = datetime.now(UTC) + timedelta(days=30)
    await writer.update(A, row["id"], {"valid_until": later}, None)
    assert [r["id"] for r in (await writer.memories.list(A, limit=10))[0]] == [row["id"]]
    gone, _ = await writer.memories.list(A, limit=10, as_of=later + timedelta(days=1))
    assert gone == []


async def test_fact_replacement_closes_the_old_interval(writer):
    facts = writer.facts
    assert await writer.upsert_fact(A, "identity", "city", "Paris", 0.9, valid_from=JAN) == "added"
    assert (
        await writer.upsert_fact(A, "identity", "city", "Berlin", 0.9, valid_from=JUN) == "replaced"
    )
    versions = await facts.list(A, include_inactive=True)
    assert [(v["value"], v["valid_from"], v["valid_until"]) for v in versions] == [
        ("Paris", JAN, JUN),
        ("Berlin", JUN, None),
    ]
    march = await facts.list(A, as_of=datetime(2026, 3, 1, tzinfo=UTC))
    assert [f["value"] for f in march] == ["Paris"]
    assert [f["value"] for f in await facts.list(A)] == ["Berlin"]
    # No valid_from: the old value is valid until now (and never ends before it began).
    assert await writer.upsert_fact(A, "identity", "city", "Rome", 1.0) == "replaced"
    berlin = [v for v in await facts.list(A, include_inactive=True) if v["value"] == "Berlin"]
    assert berlin[0]["valid_until"] >= JUN
