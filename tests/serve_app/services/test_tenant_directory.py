"""The mem0 routes' cross-owner reads: a service key finds owners within its tenant only,
a user key only ever its own memories, and what is not the caller's is a 404."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from serve_app.auth import Principal
from serve_app.db.pool import open_pool
from serve_app.errors import ApiError
from serve_app.services.tenant_directory import TenantDirectory
from serve_app.settings import Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.directory import MemoryDirectory
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table

SERVICE = Principal("k1", "t1", "service")
ALICE_KEY = Principal("k2", "t1", "user", "alice")
OTHER_TENANT = Principal("k3", "t2", "service")


@pytest.fixture
async def world(fresh_db):
    ensure_table(fresh_db, "test", 4)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    writer = GuardedWriter(pool, "test")
    ids = {}
    for user, agent in (("alice", "planner"), ("bob", "planner"), ("carol", "other")):
        item = NewMemory(content=f"{user} note", agent_id=agent, session_id=f"run-{user}")
        rows = await writer.add(Owner("t1", user), [item], np.eye(4, dtype=np.float32)[:1])
        ids[user] = rows[0]["id"]
    yield TenantDirectory(MemoryDirectory(pool), entities_listed=10), ids
    await pool.close()


async def test_a_service_key_finds_owners_within_its_tenant(world):
    directory, ids = world
    owners = await directory.owners_of(SERVICE, [ids["alice"], ids["bob"]])
    assert owners == {ids["alice"]: Owner("t1", "alice"), ids["bob"]: Owner("t1", "bob")}
    with pytest.raises(ApiError) as other:
        await directory.owner_of(OTHER_TENANT, ids["alice"])
    assert other.value.status == 404


async def test_a_user_key_finds_only_its_own(world):
    directory, ids = world
    assert await directory.owner_of(ALICE_KEY, ids["bob"]) == Owner("t1", "alice")
    with pytest.raises(ApiError) as foreign:
        await directory.owners_of(ALICE_KEY, [ids["alice"], ids["bob"]])
    assert foreign.value.status == 404
    with pytest.raises(ApiError):
        await directory.owners_of(SERVICE, [uuid.uuid4()])


async def test_entities_and_users_follow_the_key(world):
    directory, _ = world
    everyone = {(r["type"], r["name"]) for r in await directory.entities(SERVICE)}
    assert {("user", "alice"), ("user", "bob"), ("agent", "planner")} <= everyone
    own = {(r["type"], r["name"]) for r in await directory.entities(ALICE_KEY)}
    assert ("user", "bob") not in own and ("user", "alice") in own
    assert sorted(await directory.users_with(SERVICE, "agent", "planner")) == ["alice", "bob"]
    assert await directory.users_with(ALICE_KEY, "agent", "planner") == ["alice"]
    assert await directory.users_with(OTHER_TENANT, "agent", "planner") == []
