"""Data lifecycle over HTTP (issue 12): forget, facts API, expiry, archive, access tracking."""

from __future__ import annotations

import time

import psycopg
import pytest

from serve_app.testing.llm_server import extraction, fact, memory
from tests.e2e.test_extraction import memories, turns, wait_for

pytestmark = pytest.mark.e2e


def search(api, uid: str, query: str, **kw) -> list[dict]:
    r = api.post("/v1/search", json={"user_id": uid, "query": query, **kw})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_forget_leaves_nothing_and_nothing_reappears(api, fake_llm, uid):
    fake_llm.add_rule(
        f"vegan-{uid}",
        extraction(
            [memory(f"The user is vegan-{uid} and lives in Lisbon")],
            [fact("preference", "diet", "vegan")],
        ),
    )
    turns(api, uid, "s1", ("user", "hi"), ("user", "I cook a lot"), ("user", "mostly greens"))
    turns(api, uid, "s1", ("user", f"I am vegan-{uid}"))
    [m] = wait_for(lambda: memories(api, uid), what="extracted memory")
    wait_for(lambda: api.get("/v1/facts", params={"user_id": uid}).json()["facts"], what="fact")
    api.post("/v1/memories", json={"user_id": uid, "content": "Prefers window seats"})
    # pending turns that would be extracted on the next scan (3 user turns: not due yet)
    turns(api, uid, "s2", ("user", f"I am vegan-{uid} again"), ("user", "ok"), ("user", "bye"))
    assert search(api, uid, "what does the user eat?")

    r = api.delete("/v1/memories", params={"user_id": uid})
    assert r.status_code == 200, r.text
    removed = r.json()["removed"]
    assert r.json()["deleted"] == removed["memories"] == 2
    assert removed["vectors"] == 2 and removed["facts"] == 1 and removed["turns"] == 7

    def nothing_left() -> None:
        assert memories(api, uid) == []
        assert search(api, uid, "what does the user eat?") == []
        ctx = api.post("/v1/context", json={"user_id": uid, "query": "what does the user eat?"})
        assert ctx.json()["memories"] == [] and ctx.json()["facts"] == []
        assert "vegan" not in ctx.json()["context"]
        facts = api.get("/v1/facts", params={"user_id": uid, "include_inactive": True})
        assert facts.json()["facts"] == []
        for sid in ("s1", "s2"):
            assert api.get(f"/v1/sessions/{sid}", params={"user_id": uid}).status_code == 404
        history = api.get(f"/v1/memories/{m['id']}/history", params={"user_id": uid})
        assert history.status_code == 404

    nothing_left()
    time.sleep(2.5)  # two extraction scans later
    nothing_left()


def test_facts_set_explicitly_win_and_delete_removes_them(api, uid):
    put = api.put(
        "/v1/facts", json={"user_id": uid, "category": "home", "key": "city", "value": "Porto"}
    )
    assert put.status_code == 200 and put.json()["source"] == "user", put.text
    api.put("/v1/facts", json={"user_id": uid, "category": "home", "key": "city", "value": "Faro"})
    hist = api.get("/v1/facts", params={"user_id": uid, "include_inactive": True}).json()["facts"]
    assert [f["value"] for f in hist] == ["Porto", "Faro"]
    assert api.delete("/v1/facts", params={"user_id": uid, "key": "city"}).status_code == 422
    r = api.delete("/v1/facts", params={"user_id": uid, "category": "home", "key": "city"})
    assert r.json()["deleted"] == 2
    assert api.get("/v1/facts", params={"user_id": uid, "include_inactive": True}).json() == {
        "facts": [],
        "next_cursor": None,
    }


def test_ttl_memory_disappears_and_is_purged(service, api, uid):
    r = api.post("/v1/memories", json={"user_id": uid, "content": "Parked on level 3", "ttl_s": 2})
    assert r.status_code == 201 and r.json()["expires_at"], r.text
    mid = r.json()["id"]
    assert api.get(f"/v1/memories/{mid}", params={"user_id": uid}).status_code == 200
    assert [x["id"] for x in search(api, uid, "where is the car parked?")] == [mid]
    time.sleep(2.2)
    assert api.get(f"/v1/memories/{mid}", params={"user_id": uid}).status_code == 404
    assert search(api, uid, "where is the car parked?") == []

    def purged() -> bool:
        with psycopg.connect(service.dsn) as conn:
            row = conn.execute("SELECT count(*) FROM memory_items WHERE id = %s", (mid,)).fetchone()
        return row[0] == 0

    wait_for(purged, timeout=15, what="purge of the expired memory")


def test_archive_and_access_tracking(api, uid):
    mid = api.post("/v1/memories", json={"user_id": uid, "content": "Allergic to cats"}).json()[
        "id"
    ]
    assert [x["id"] for x in search(api, uid, "any allergies?")] == [mid]

    def counted() -> dict | None:
        row = api.get(f"/v1/memories/{mid}", params={"user_id": uid}).json()
        return row if row["access_count"] >= 1 else None

    row = wait_for(counted, timeout=10, what="access count written")
    assert row["last_accessed_at"] is not None
    r = api.patch(f"/v1/memories/{mid}", params={"user_id": uid}, json={"status": "archived"})
    assert r.status_code == 200 and r.json()["status"] == "archived", r.text
    assert search(api, uid, "any allergies?") == []
    assert [x["id"] for x in search(api, uid, "any allergies?", include_archived=True)] == [mid]
    ctx = api.post("/v1/context", json={"user_id": uid, "query": "any allergies?"}).json()
    assert ctx["memories"] == []
    listed = api.get("/v1/memories", params={"user_id": uid, "status": "archived"}).json()
    assert [x["id"] for x in listed["memories"]] == [mid]


def test_erase_tenant_needs_admin_and_confirmation(service, api):
    assert api.delete("/v1/admin/data", params={"confirm": "default"}).status_code == 403
