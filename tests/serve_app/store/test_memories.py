"""MemoryStore against a real PostgreSQL + pgvector (no Ray)."""

from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest

from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store import MemoryStore, NewMemory, Owner
from serve_app.store.memories import InvalidCursor
from serve_app.store.vectors import ensure_table

DIM = 8
A = Owner("t1", "alice")
B = Owner("t1", "bob")
OTHER_TENANT_A = Owner("t2", "alice")


def vecs(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
async def store(fresh_db):
    ensure_table(fresh_db, "test", DIM)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield MemoryStore(pool, "test")
    await pool.close()


async def add(store, owner, *contents, **kw):
    items = [NewMemory(content=c, **kw) for c in contents]
    return await store.add(owner, items, vecs(len(items)), actor="test")


async def test_add_get_roundtrip_and_history(store):
    [row] = await add(store, A, "I live in Lisbon", tags=["home"], metadata={"k": 1})
    got = await store.get(A, row["id"])
    assert got["content"] == "I live in Lisbon"
    assert got["tags"] == ["home"] and got["metadata"] == {"k": 1}
    events = await store.history(A, row["id"])
    assert [e["event"] for e in events] == ["ADD"]
    assert events[0]["new_content"] == "I live in Lisbon"


async def test_other_user_and_tenant_see_nothing(store):
    [row] = await add(store, A, "secret of alice")
    assert await store.get(B, row["id"]) is None
    assert await store.get(OTHER_TENANT_A, row["id"]) is None
    assert await store.history(B, row["id"]) is None
    assert await store.update(B, row["id"], {"content": "hijack"}, None) is None
    assert await store.delete(B, row["id"]) is False
    assert await store.delete_scope(OTHER_TENANT_A) == 0
    assert (await store.get(A, row["id"]))["content"] == "secret of alice"
    rows, _ = await store.list(B, limit=10)
    assert rows == []


async def test_update_records_old_and_new(store):
    [row] = await add(store, A, "likes tea")
    updated = await store.update(A, row["id"], {"content": "likes coffee"}, vecs(1, 5)[0])
    assert updated["content"] == "likes coffee"
    assert updated["updated_at"] >= row["updated_at"]
    events = await store.history(A, row["id"])
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
    assert await store.get(A, row["id"]) is None
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
    assert await store.count("t1") == 2
    assert await store.delete_scope(A) == 1
    rows, _ = await store.list(B, limit=10)
    assert [r["content"] for r in rows] == ["b1"]


async def test_list_paginates_without_gaps_or_repeats(store):
    contents = [f"memory {i}" for i in range(23)]
    for c in contents:
        await add(store, A, c)
    seen, cursor = [], None
    while True:
        rows, cursor = await store.list(A, limit=5, cursor=cursor)
        seen += [r["content"] for r in rows]
        if cursor is None:
            break
    assert sorted(seen) == sorted(contents) and len(seen) == len(set(seen))
    assert seen[0] == "memory 22"  # newest first


async def test_list_filters_by_type(store):
    await add(store, A, "p", type="preference")
    await add(store, A, "f", type="fact")
    rows, _ = await store.list(A, limit=10, type="preference")
    assert [r["content"] for r in rows] == ["p"]


async def test_invalid_cursor(store):
    with pytest.raises(InvalidCursor):
        await store.list(A, limit=5, cursor="not-a-cursor")


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
    with pytest.raises(psycopg.DataError):
        await store.add(A, bad, vecs(2))
    assert await store.count("t1") == 0


async def test_get_unknown_id(store):
    assert await store.get(A, uuid.uuid4()) is None
