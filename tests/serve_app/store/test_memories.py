"""MemoryStore (through the GuardedWriter) against a real PostgreSQL + pgvector (no Ray)."""

from __future__ import annotations

import json
import tempfile
import uuid

import numpy as np
import psycopg
import pytest

from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter, ValidationError
from serve_app.store.memories import InvalidCursor
from serve_app.store.quota import Quota
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM, vecs

A = Owner("t1", "alice")
B = Owner("t1", "bob")
OTHER_TENANT_A = Owner("t2", "alice")


@pytest.fixture
async def store(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    return GuardedWriter(pool, "test")


async def add(store, owner, *contents, **kw):
    items = [NewMemory(content=c, **kw) for c in contents]
    return await store.add(owner, items, vecs(len(items)), actor="test")


async def test_add_get_roundtrip_and_history(store):
    [row] = await add(store, A, "I live in Lisbon", tags=["home"], metadata={"k": 1})
    got = await store.memories.get(A, row["id"])
    assert got["content"] == "I live in Lisbon"
    assert got["tags"] == ["home"] and got["metadata"] == {"k": 1}
    events = await store.memories.history(A, row["id"], 1000)
    assert [e["event"] for e in events] == ["ADD"]
    assert events[0]["new_content"] == "I live in Lisbon"


async def test_other_user_and_tenant_see_nothing(store):
    [row] = await add(store, A, "secret of alice")
    assert await store.memories.get(B, row["id"]) is None
    assert await store.memories.get(OTHER_TENANT_A, row["id"]) is None
    assert await store.memories.history(B, row["id"], 1000) is None
    assert await store.update(B, row["id"], {"content": "hijack"}, None) is None
    assert await store.delete(B, row["id"]) is False
    assert await store.delete_scope(OTHER_TENANT_A) == 0
    assert (await store.memories.get(A, row["id"]))["content"] == "secret of alice"
    rows, _ = await store.memories.list(B, limit=10)
    assert rows == []


async def test_update_records_old_and_new(store):
    [row] = await add(store, A, "likes tea")
    updated = await store.update(A, row["id"], {"content": "likes coffee"}, vecs(1, 5)[0])
    assert updated["content"] == "likes coffee"
    assert updated["updated_at"] >= row["updated_at"]
    events = await store.memories.history(A, row["id"], 1000)
    assert [(e["event"], e["old_content"], e["new_content"]) for e in events][-1] == (
        "UPDATE",
        "likes tea",
        "likes coffee",
    )


async def test_update_rejects_unknown_columns(store):
    [row] = await add(store, A, "x")
    with pytest.raises(ValueError):
        await store.update(A, row["id"], {"tenant_id": "t2"}, None)


async def test_delete_forgets_history_content(store):
    [row] = await add(store, A, "forget me")
    assert await store.delete(A, row["id"]) is True
    assert await store.memories.get(A, row["id"]) is None
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT event, old_content, new_content FROM memory_history WHERE memory_id = %s"
            " ORDER BY id",
            (row["id"],),
        )
        events = await cur.fetchall()
    assert [e["event"] for e in events] == ["ADD", "DELETE"]
    assert all(e["old_content"] is None and e["new_content"] is None for e in events)


async def test_delete_scope_narrows_by_agent_and_session(store):
    await add(store, A, "a1", agent_id="ag1")
    await add(store, A, "a2", agent_id="ag2")
    await add(store, A, "s1", session_id="s1", scope="session")
    await add(store, B, "b1", agent_id="ag1")
    assert await store.delete_scope(A, agent_id="ag1") == 1
    assert await store.delete_scope(A, session_id="s1") == 1
    assert await store.memories.count("t1") == 2
    assert await store.delete_scope(A) == 1
    rows, _ = await store.memories.list(B, limit=10)
    assert [r["content"] for r in rows] == ["b1"]


async def test_list_paginates_without_gaps_or_repeats(store):
    contents = [f"memory {i}" for i in range(23)]
    for c in contents:
        await add(store, A, c)
    seen, cursor = [], None
    while True:
        rows, cursor = await store.memories.list(A, limit=5, cursor=cursor)
        seen += [r["content"] for r in rows]
        if cursor is None:
            break
    assert sorted(seen) == sorted(contents) and len(seen) == len(set(seen))
    assert seen[0] == "memory 22"  # newest first


async def test_list_filters_by_type(store):
    await add(store, A, "p", type="preference")
    await add(store, A, "f", type="fact")
    rows, _ = await store.memories.list(A, limit=10, type="preference")
    assert [r["content"] for r in rows] == ["p"]


async def test_invalid_cursor(store):
    with pytest.raises(InvalidCursor):
        await store.memories.list(A, limit=5, cursor="not-a-cursor")


async def test_writes_bump_owner_version(store):
    async def version():
        async with store.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT version FROM memory_owner_versions"
                " WHERE tenant_id = 't1' AND owner = 'alice'"
            )
            row = await cur.fetchone()
            return row["version"] if row else 0

    v0 = await version()
    [row] = await add(store, A, "v")
    v1 = await version()
    await store.update(A, row["id"], {"importance": 0.9}, None)
    v2 = await version()
    await store.delete(A, row["id"])
    v3 = await version()
    assert v0 < v1 < v2 < v3


async def test_batch_add_is_atomic(store):
    bad = [NewMemory(content="ok"), NewMemory(content="bad\x00nul")]
    with pytest.raises(ValidationError, match="item 1: content must not contain NUL"):
        await store.add(A, bad, vecs(2))  # the writer refuses it before the database
    with pytest.raises(psycopg.DataError):  # the statement itself is atomic too
        await store._insert(A, bad, vecs(2), [None, None], None, Quota(), None, ())
    assert await store.memories.count("t1") == 0


async def test_get_unknown_id(store):
    assert await store.memories.get(A, uuid.uuid4()) is None


async def frontend_messages(store, call) -> list[str]:
    """Run ``call`` on the pool's only connection with libpq tracing; the messages it sent."""
    conn = await store.pool.getconn()
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        await store.pool.putconn(conn)
        try:
            await call()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return [line.split("\t")[3] for line in trace.read().splitlines() if "\tF\t" in line]


async def test_batch_add_is_one_statement_in_input_order_with_vectors(store):
    items = [NewMemory(content=f"fact number {i}", tags=[f"t{i}"] * (i % 3)) for i in range(100)]
    vectors = vecs(100, seed=3)
    rows: list = []

    async def call():
        rows.extend(await store.add(A, items, vectors, actor="bulk"))

    sent = await frontend_messages(store, call)
    assert sent.count("Execute") + sent.count("Query") == 1  # was ~300 single-row statements
    assert sent.count("Sync") == 1  # one round trip
    assert [r["content"] for r in rows] == [i.content for i in items]
    assert [r["tags"] for r in rows] == [i.tags for i in items]
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT i.id, i.seq, v.embedding, v.owner FROM memory_items i"
            " JOIN memory_vectors_test v ON v.item_id = i.id ORDER BY i.seq"
        )
        stored = await cur.fetchall()
        cur = await conn.execute(
            "SELECT memory_id, event, new_content, actor FROM memory_history ORDER BY id"
        )
        events = await cur.fetchall()
    assert [s["id"] for s in stored] == [r["id"] for r in rows]  # written in input order
    for s, v in zip(stored, vectors, strict=True):
        assert np.allclose(s["embedding"].to_numpy(), v, atol=1e-6) and s["owner"] == "alice"
    assert [(e["memory_id"], e["event"], e["actor"]) for e in events] == [
        (r["id"], "ADD", "bulk") for r in rows
    ]
    assert [e["new_content"] for e in events] == [i.content for i in items]


async def test_single_add_is_one_round_trip_and_notifies(store, fresh_db):
    listener = await psycopg.AsyncConnection.connect(fresh_db, autocommit=True)
    await listener.execute("LISTEN memserve_changes")
    rows: list = []

    async def call():
        rows.extend(await add(store, A, "one"))

    sent = await frontend_messages(store, call)
    assert sent.count("Execute") + sent.count("Query") == 1 and sent.count("Sync") == 1
    note = await anext(listener.notifies(timeout=5))
    assert json.loads(note.payload) == ["t1", "alice", 1]
    await listener.close()
    assert (await store.memories.get(A, rows[0]["id"]))["content"] == "one"


async def test_batch_failing_mid_way_writes_nothing(store):
    items = [NewMemory(content=f"m{i}") for i in range(100)]
    items[57] = NewMemory(content="bad scope", scope="galaxy")  # violates the CHECK on the server
    with pytest.raises(ValidationError, match="item 57: scope"):
        await store.add(A, items, vecs(100))
    with pytest.raises(psycopg.errors.CheckViolation):  # below the writer, the statement
        await store._insert(A, items, vecs(100), [None] * 100, None, Quota(), None, ())
    async with store.pool.connection() as conn:
        for table in ("memory_items", "memory_vectors_test", "memory_history"):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
            assert (await cur.fetchone())["n"] == 0, table
        cur = await conn.execute("SELECT count(*) AS n FROM memory_owner_versions")
        assert (await cur.fetchone())["n"] == 0


async def test_shared_items_of_a_batch_get_their_own_owners(store):
    rows = await store.add(
        A,
        [
            NewMemory(content="mine"),
            NewMemory(content="team", scope="agent", agent_id="bot"),
            NewMemory(content="everyone", scope="org"),
        ],
        vecs(3),
    )
    assert [r["user_id"] for r in rows] == ["alice", None, None]
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT owner, version FROM memory_owner_versions WHERE tenant_id = 't1' ORDER BY owner"
        )
        assert [(r["owner"], r["version"]) for r in await cur.fetchall()] == [
            ("@agent:bot", 1),
            ("@org", 1),
            ("alice", 1),
        ]


async def test_add_rejects_mismatched_embeddings(store):
    with pytest.raises(ValueError):
        await store.add(A, [NewMemory(content="x")], vecs(2))
    assert await store.add(A, [], vecs(0)) == []


async def test_a_history_read_returns_the_newest_events_only(store):
    """A memory updated without end has a history without end: a read returns the
    newest ``limit`` events (``limits.history_events``), oldest first, not all of them."""
    [row] = await add(store, A, "v0")
    for i in range(1, 31):
        await store.update(A, row["id"], {"content": f"v{i}"}, None)
    events = await store.memories.history(A, row["id"], 10)
    assert len(events) == 10
    assert [e["new_content"] for e in events] == [f"v{i}" for i in range(21, 31)]
