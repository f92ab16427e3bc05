"""Bad input: a clear 4xx JSON error, and nothing written."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def count(api, uid):
    return len(api.get("/v1/memories", params={"user_id": uid, "limit": 200}).json()["memories"])


@pytest.mark.parametrize(
    "body,status",
    [
        ({"content": ""}, 422),
        ({"content": "   "}, 422),
        ({"content": "x" * 8001}, 422),
        ({"content": 123}, 422),
        ({"content": "ok", "importance": 2}, 422),
        ({"content": "ok", "importance": "high"}, 422),
        ({"content": "ok", "type": "bogus"}, 422),
        ({"content": "ok", "tags": "notalist"}, 422),
        ({"content": "ok", "unknown_field": 1}, 422),
        ({"content": "ok", "metadata": []}, 422),
        ({}, 422),
    ],
)
def test_bad_create(api, uid, body, status):
    r = api.post("/v1/memories", json={"user_id": uid, **body})
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["message"]
    assert count(api, uid) == 0


def test_malformed_json(api, uid):
    r = api.post(
        "/v1/memories",
        content=b'{"user_id": "x", "content": ',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_oversized_batch_writes_nothing(api, uid):
    items = [{"content": f"item {i}"} for i in range(101)]
    r = api.post("/v1/memories/batch", json={"user_id": uid, "items": items})
    assert r.status_code == 422
    assert count(api, uid) == 0


def test_batch_with_one_bad_item_writes_nothing(api, uid):
    items = [{"content": "fine"}, {"content": ""}]
    assert api.post("/v1/memories/batch", json={"user_id": uid, "items": items}).status_code == 422
    assert count(api, uid) == 0


@pytest.mark.parametrize("top_k", [0, -1, 101, "ten"])
def test_top_k_out_of_range(api, uid, top_k):
    r = api.post("/v1/search", json={"user_id": uid, "query": "x", "top_k": top_k})
    assert r.status_code == 422


def test_invalid_uuid(api, uid):
    for method in ("GET", "PATCH", "DELETE"):
        r = api.request(
            method,
            "/v1/memories/not-a-uuid",
            params={"user_id": uid},
            json={"content": "x"} if method == "PATCH" else None,
        )
        assert r.status_code == 422, method
        assert r.json()["error"]["code"] == "invalid_request"


def test_body_too_large(api, uid):
    r = api.post(
        "/v1/memories", content=b"x" * 2_000_000, headers={"content-type": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"


def test_service_key_without_user(api):
    r = api.post("/v1/memories", json={"content": "no owner"})
    assert r.status_code == 400 and "user_id" in r.json()["error"]["message"]


def test_bad_cursor_and_limit(api, uid):
    assert api.get("/v1/memories", params={"user_id": uid, "cursor": "zzz"}).status_code == 400
    assert api.get("/v1/memories", params={"user_id": uid, "limit": 0}).status_code == 422
    assert api.get("/v1/memories", params={"user_id": uid, "limit": 10_000}).status_code == 422


def test_patch_null_or_empty(api, uid):
    m = api.post("/v1/memories", json={"user_id": uid, "content": "keep me"}).json()
    for body in ({}, {"content": None}, {"content": ""}):
        r = api.patch(f"/v1/memories/{m['id']}", params={"user_id": uid}, json=body)
        assert r.status_code == 422, body
    assert (
        api.get(f"/v1/memories/{m['id']}", params={"user_id": uid}).json()["content"] == "keep me"
    )


@pytest.mark.parametrize(
    "method,params,body",
    [
        ("DELETE", {"category": "diet", "key": "a\x00b"}, None),
        ("DELETE", {"category": "di\x00et"}, None),
        ("GET", {"category": "di\x00et"}, None),
        ("PUT", {}, {"category": "diet", "key": "kind", "value": "vegan\x00"}),
    ],
)
def test_nul_in_fact_fields_is_422(api, uid, method, params, body):
    """PostgreSQL text refuses NUL: it must be a 422, not a database error (a 500)."""
    r = api.request(method, "/v1/facts", params={"user_id": uid, **params}, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request"
    assert api.get("/v1/facts", params={"user_id": uid}).json()["facts"] == []
