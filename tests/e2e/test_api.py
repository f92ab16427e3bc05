"""Every endpoint of DESIGN §8, over HTTP against the real Serve app."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.e2e


def create(api, uid, content, **kw):
    r = api.post("/v1/memories", json={"user_id": uid, "content": content, **kw})
    assert r.status_code == 201, r.text
    return r.json()


def test_health_and_ready(api):
    assert api.get("/healthz").json() == {"status": "ok"}
    r = api.get("/readyz")
    assert r.status_code == 200 and r.json()["components"]["database"] == "ok"


def test_create_get_roundtrip(api, uid):
    m = create(
        api,
        uid,
        "I am allergic to peanuts",
        type="fact",
        tags=["health"],
        metadata={"source": "chat"},
        importance=0.9,
        agent_id="agent-1",
    )
    assert m["user_id"] == uid and m["type"] == "fact" and m["tags"] == ["health"]
    assert m["metadata"] == {"source": "chat"} and m["importance"] == pytest.approx(0.9)
    for field in ("id", "agent_id", "session_id", "content", "created_at", "updated_at"):
        assert field in m
    got = api.get(f"/v1/memories/{m['id']}", params={"user_id": uid}).json()
    assert got == m


def test_batch_create(api, uid):
    r = api.post(
        "/v1/memories/batch",
        json={
            "user_id": uid,
            "items": [
                {"content": "Prefers dark mode"},
                {"content": "Works as a nurse", "type": "fact"},
            ],
        },
    )
    assert r.status_code == 201, r.text
    assert [m["content"] for m in r.json()["memories"]] == ["Prefers dark mode", "Works as a nurse"]


def test_search_finds_paraphrase_first(api, uid):
    create(api, uid, "My daughter Emma starts kindergarten in September")
    create(api, uid, "I drive a blue Toyota Corolla")
    create(api, uid, "I prefer vegetarian restaurants")
    r = api.post("/v1/search", json={"user_id": uid, "query": "what car do I own?"})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert results[0]["content"] == "I drive a blue Toyota Corolla"
    assert results[0]["score"] >= results[-1]["score"]
    assert "similarity" in results[0]


def test_search_top_k_threshold_type_and_tag_filters(api, uid):
    create(api, uid, "Likes hiking in the Alps", type="preference", tags=["outdoors"])
    create(api, uid, "Hiking boots size 42", type="fact", tags=["gear"])
    create(api, uid, "Allergic to cats", type="fact")
    q = {"user_id": uid, "query": "hiking"}
    assert len(api.post("/v1/search", json={**q, "top_k": 1}).json()["results"]) == 1
    typed = api.post("/v1/search", json={**q, "types": ["preference"]}).json()["results"]
    assert [m["content"] for m in typed] == ["Likes hiking in the Alps"]
    tagged = api.post("/v1/search", json={**q, "tags": ["gear"]}).json()["results"]
    assert [m["content"] for m in tagged] == ["Hiking boots size 42"]
    high = api.post("/v1/search", json={**q, "threshold": 0.99}).json()["results"]
    assert high == []


def test_update_reembeds_and_records_history(api, uid):
    m = create(api, uid, "I live in Berlin")
    r = api.patch(
        f"/v1/memories/{m['id']}",
        params={"user_id": uid},
        json={"content": "I moved to Tokyo", "tags": ["home"]},
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "I moved to Tokyo" and r.json()["tags"] == ["home"]
    hits = api.post(
        "/v1/search", json={"user_id": uid, "query": "which city in Japan", "top_k": 1}
    ).json()["results"]
    assert hits[0]["content"] == "I moved to Tokyo"
    events = api.get(f"/v1/memories/{m['id']}/history", params={"user_id": uid}).json()["events"]
    assert [e["event"] for e in events] == ["ADD", "UPDATE"]
    assert (events[1]["old_content"], events[1]["new_content"]) == (
        "I live in Berlin",
        "I moved to Tokyo",
    )


def test_delete_one(api, uid):
    m = create(api, uid, "temporary note")
    assert api.delete(f"/v1/memories/{m['id']}", params={"user_id": uid}).status_code == 204
    assert api.get(f"/v1/memories/{m['id']}", params={"user_id": uid}).status_code == 404
    assert api.delete(f"/v1/memories/{m['id']}", params={"user_id": uid}).status_code == 404
    hits = api.post("/v1/search", json={"user_id": uid, "query": "temporary note"}).json()
    assert hits["results"] == []


def test_list_paginates(api, uid):
    ids = {create(api, uid, f"note number {i}")["id"] for i in range(7)}
    seen, cursor = [], None
    while True:
        params = {"user_id": uid, "limit": 3, **({"cursor": cursor} if cursor else {})}
        body = api.get("/v1/memories", params=params).json()
        seen += [m["id"] for m in body["memories"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert set(seen) == ids and len(seen) == 7


def test_delete_by_scope(api, uid):
    create(api, uid, "session note", session_id="s-1")
    create(api, uid, "agent note", agent_id="a-1")
    create(api, uid, "plain note")
    r = api.request("DELETE", "/v1/memories", params={"user_id": uid, "session_id": "s-1"})
    assert r.json()["deleted"] == 1 and r.json()["removed"]["memories"] == 1
    r = api.request("DELETE", "/v1/memories", params={"user_id": uid})
    assert r.json()["deleted"] == 2 and r.json()["removed"]["memories"] == 2
    assert api.get("/v1/memories", params={"user_id": uid}).json()["memories"] == []


def test_unknown_id_is_404_json(api, uid):
    r = api.get(f"/v1/memories/{uuid.uuid4()}", params={"user_id": uid})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_openapi_published(api):
    paths = api.get("/openapi.json").json()["paths"]
    for p in ("/v1/memories", "/v1/memories/{memory_id}", "/v1/search", "/readyz"):
        assert p in paths
