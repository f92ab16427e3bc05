"""Lifecycle routes in-process (no Ray): real Postgres, encoder and retriever behind the app."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_lifecycle_test_key_0123456789"


@pytest.fixture
async def client(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY).with_(
        quota={"max_memories_per_user": 3}, lifecycle={"access_flush_s": 0.1}
    )
    boot = bootstrap(settings, fresh_db)
    api = in_process_api(settings, boot.model, fresh_db, encoder, KEY)
    async with api as (c, services):
        yield c


async def search(c, query: str, **kw) -> list[str]:
    r = await c.post("/v1/search", json={"user_id": "ann", "query": query, **kw})
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["results"]]


async def test_quota_ttl_archive_access_and_forget(client):
    c = client
    items = [{"content": "Ann is allergic to cats"}, {"content": "Ann parks at 3", "ttl_s": 60}]
    add = await c.post("/v1/memories/batch", json={"user_id": "ann", "items": items})
    assert add.status_code == 201, add.text
    cats, parked = add.json()["memories"]
    assert parked["expires_at"] is not None and cats["expires_at"] is None
    over = await c.post(
        "/v1/memories/batch",
        json={"user_id": "ann", "items": [{"content": "one"}, {"content": "two"}]},
    )
    assert over.status_code == 403 and over.json()["error"]["code"] == "quota_exceeded"
    assert len((await c.get("/v1/memories", params={"user_id": "ann"})).json()["memories"]) == 2

    assert "Ann is allergic to cats" in await search(c, "which allergies?")
    await asyncio.sleep(0.3)  # the access flush
    got = (await c.get(f"/v1/memories/{cats['id']}", params={"user_id": "ann"})).json()
    assert got["access_count"] >= 1 and got["last_accessed_at"] is not None

    r = await c.patch(
        f"/v1/memories/{cats['id']}", params={"user_id": "ann"}, json={"status": "archived"}
    )
    assert r.status_code == 200 and r.json()["status"] == "archived"
    assert "Ann is allergic to cats" not in await search(c, "which allergies?")
    assert "Ann is allergic to cats" in await search(c, "which allergies?", include_archived=True)

    r = await c.patch(
        f"/v1/memories/{parked['id']}",
        params={"user_id": "ann"},
        json={"expires_at": "2000-01-01T00:00:00Z"},
    )
    assert r.status_code == 200, r.text
    assert (
        await c.get(f"/v1/memories/{parked['id']}", params={"user_id": "ann"})
    ).status_code == 404

    await c.put(
        "/v1/facts", json={"user_id": "ann", "category": "pet", "key": "cat", "value": "no"}
    )
    r = await c.delete("/v1/memories", params={"user_id": "ann"})
    assert r.status_code == 200, r.text
    assert r.json()["removed"]["memories"] == 2 and r.json()["removed"]["facts"] == 1
    assert (await c.get("/v1/facts", params={"user_id": "ann"})).json()["facts"] == []
    assert await search(c, "which allergies?", include_archived=True) == []
