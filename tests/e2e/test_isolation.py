"""Two tenants x two users, service and user keys: nobody sees another's memories."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e
SECRET = "The vault combination is 31-17-42"


@pytest.fixture(scope="module")
def clients(service, keys):
    names = ["service", "service_t2", "alice", "bob", "alice_t2"]
    cs = {n: client_for(service, getattr(keys, n)) for n in names}
    yield cs
    for c in cs.values():
        c.close()


@pytest.fixture(scope="module")
def alice_memory(clients):
    r = clients["alice"].post("/v1/memories", json={"content": SECRET, "session_id": "iso-s"})
    assert r.status_code == 201, r.text
    assert r.json()["user_id"] == "alice"
    return r.json()


def test_owner_sees_own_memory(clients, alice_memory):
    r = clients["alice"].post("/v1/search", json={"query": "vault combination"})
    assert r.json()["results"][0]["id"] == alice_memory["id"]
    via_service = clients["service"].get(
        f"/v1/memories/{alice_memory['id']}", params={"user_id": "alice"}
    )
    assert via_service.status_code == 200


@pytest.mark.parametrize(
    "who,params",
    [
        ("bob", {}),
        ("service", {"user_id": "bob"}),
        ("service_t2", {"user_id": "alice"}),
        ("alice_t2", {}),
    ],
)
def test_others_get_404_by_id(clients, alice_memory, who, params):
    mid = alice_memory["id"]
    c = clients[who]
    for r in (
        c.get(f"/v1/memories/{mid}", params=params),
        c.get(f"/v1/memories/{mid}/history", params=params),
        c.patch(f"/v1/memories/{mid}", params=params, json={"content": "pwned"}),
        c.delete(f"/v1/memories/{mid}", params=params),
    ):
        assert r.status_code == 404, (who, r.request.method, r.text)
        assert r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "who,body",
    [
        ("bob", {}),
        ("service", {"user_id": "bob"}),
        ("service_t2", {"user_id": "alice"}),
        ("alice_t2", {}),
    ],
)
def test_others_never_find_it(clients, alice_memory, who, body):
    c = clients[who]
    hits = c.post("/v1/search", json={"query": SECRET, **body}).json()["results"]
    assert all(h["id"] != alice_memory["id"] and h["content"] != SECRET for h in hits)
    listed = c.get("/v1/memories", params=body).json()["memories"]
    assert all(m["id"] != alice_memory["id"] for m in listed)
    deleted = c.request("DELETE", "/v1/memories", params={**body, "session_id": "iso-s"})
    assert deleted.json()["deleted"] == 0


def test_user_key_cannot_name_another_user(clients, alice_memory):
    c = clients["bob"]
    assert c.post("/v1/search", json={"query": "vault", "user_id": "alice"}).status_code == 403
    assert (
        c.get(f"/v1/memories/{alice_memory['id']}", params={"user_id": "alice"}).status_code == 403
    )
    assert c.post("/v1/memories", json={"content": "x", "user_id": "alice"}).status_code == 403
    assert c.request("DELETE", "/v1/memories", params={"user_id": "alice"}).status_code == 403


def test_memory_survives_all_attempts(clients, alice_memory):
    r = clients["alice"].get(f"/v1/memories/{alice_memory['id']}")
    assert r.status_code == 200 and r.json()["content"] == SECRET


def test_missing_or_bad_key(service):
    for key in (None, "msk_nope"):
        with client_for(service, key) as c:
            r = c.post("/v1/search", json={"query": "x", "user_id": "alice"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
