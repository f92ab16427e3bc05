"""Bad input: a clear 4xx JSON error, and nothing written."""

from __future__ import annotations

import json

import httpx
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


def _raw(api, method: str, path: str, body: bytes, **kw):
    headers = {"content-type": "application/json"} | kw.pop("headers", {})
    return api.request(method, path, content=body, headers=headers, **kw)


@pytest.mark.parametrize("if_match", ['"١٢"', '"²"', f'"{10**30}"', '"-1"', '"0"'])
def test_if_match_out_of_range_or_not_ascii_digits_is_422(api, uid, if_match):
    """ "²" passed isdigit() and failed int() (a 500); 10**30 overflowed the column."""
    m = api.post("/v1/memories", json={"user_id": uid, "content": "keep me"}).json()
    r = _raw(
        api,
        "PATCH",
        f"/v1/memories/{m['id']}",
        b'{"content": "changed"}',
        params={"user_id": uid},
        headers={"if-match": if_match.encode()},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
    for version in (10**30, -1, "١٢"):
        r = api.patch(
            f"/v1/memories/{m['id']}",
            params={"user_id": uid},
            json={"content": "changed", "version": version},
        )
        assert r.status_code == 422, r.text
    got = api.get(f"/v1/memories/{m['id']}", params={"user_id": uid}).json()
    assert got["content"] == "keep me" and got["version"] == 1


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/v1/search", {"query": "x", "metadata": {"k": "a\x00b"}}),  # was a 503
        ("POST", "/v1/search", {"query": "x", "metadata": {"k\x00": "v"}}),
        ("POST", "/v1/memories", {"content": "a\ud800b"}),  # unpaired surrogate: a 500
        ("POST", "/v1/memories", {"content": "x", "metadata": {"k": ["\udc00"]}}),
        ("POST", "/v1/context", {"query": "\ud800"}),
        (
            "POST",
            "/mem0/v3/memories/search/",
            {"query": "x", "filters": {"categories": {"in": "a"}}},
        ),
        ("POST", "/mem0/v3/memories/", {"filters": {"categories": {"in": "a"}}}),
        (
            "POST",
            "/mem0/v3/memories/search/",
            {"query": "x", "filters": {"metadata": {"k": "\x00"}}},
        ),
    ],
)
def test_hostile_strings_and_filters_are_4xx(api, uid, method, path, body):
    raw = json.dumps({"user_id": uid, **body}).encode()  # ASCII: the surrogate stays escaped
    r = _raw(api, method, path, raw)
    assert 400 <= r.status_code < 500 and r.json()["error"]["code"], r.text
    assert count(api, uid) == 0


def test_nul_in_admin_fields_is_422(service, uid):
    with httpx.Client(
        base_url=service.base_url, headers={"Authorization": f"Bearer {service.admin_key}"}
    ) as admin:
        r = admin.get("/v1/admin/extraction/dead-letters", params={"user_id": "a\x00b"})
        assert r.status_code == 422, r.text
        r = admin.post("/v1/admin/consolidate", json={"user_id": "a\x00b"})
        assert r.status_code == 422, r.text
        r = admin.post("/v1/admin/keys", json={"role": "service", "name": "n\x00"})
        assert r.status_code == 422, r.text
        assert all(
            "\x00" not in (k["name"] or "") for k in admin.get("/v1/admin/keys").json()["keys"]
        )


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/facts", "/v1/export", "/mem0/v1/entities/"])
def test_deep_nesting_is_4xx_on_any_route(api, uid, path):
    """A body nested 100k deep made the parser (and the rate limiter's work estimate,
    which reads the body of every route) raise RecursionError: a 500."""
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 5000 + b"1" + b"}" * 5000):
        r = _raw(api, "GET", path, body, params={"user_id": uid})
        assert r.status_code == 422 and "nested" in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("header", [None, "Basic abc", "Bearer"])
def test_a_stranger_gets_401_before_the_body_is_read(service, uid, header):
    """Without a (well-formed) key: 401, not the 400/413 reading the body would give."""
    headers = {"content-type": "application/json"} | ({"authorization": header} if header else {})
    with httpx.Client(base_url=service.base_url, headers=headers, timeout=30) as c:
        for body in (b'{"user_id": "x", "content": ', b"x" * 2_000_000):
            for path in ("/v1/memories", "/mem0/v3/memories/add/", "/v1/chat/completions"):
                r = c.post(path, content=body)
                assert r.status_code in (401, 429), (path, r.status_code, r.text)
