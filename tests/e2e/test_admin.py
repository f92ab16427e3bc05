"""Key administration: admin keys only, own tenant only, secrets shown once, revocation at once."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def admin(service):
    with client_for(service, service.admin_key) as c:
        yield c


def test_create_use_list_revoke(service, admin, uid):
    r = admin.post("/v1/admin/keys", json={"role": "user", "user_id": uid, "name": "phone app"})
    assert r.status_code == 201, r.text
    created = r.json()
    key = created["key"]
    assert key.startswith("msk_") and created["user_id"] == uid and created["revoked_at"] is None
    with client_for(service, key) as user:
        m = user.post("/v1/memories", json={"content": "I like green tea"})
        assert m.status_code == 201 and m.json()["user_id"] == uid
        listed = admin.get("/v1/admin/keys").json()["keys"]
        mine = [k for k in listed if k["id"] == created["id"]]
        assert len(mine) == 1 and mine[0]["name"] == "phone app"
        assert all("key" not in k and "key_hash" not in k for k in listed)
        assert key not in admin.get("/v1/admin/keys").text
        assert admin.get(f"/v1/admin/keys/{created['id']}").json()["prefix"] == key[:12]
        assert admin.delete(f"/v1/admin/keys/{created['id']}").status_code == 204
        r = user.get("/v1/memories")  # the very next request
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert admin.delete(f"/v1/admin/keys/{created['id']}").status_code == 404
    revoked = admin.get(f"/v1/admin/keys/{created['id']}").json()
    assert revoked["revoked_at"] is not None


def test_service_key_created_by_admin_acts_for_users(service, admin, uid):
    key = admin.post("/v1/admin/keys", json={"role": "service"}).json()["key"]
    with client_for(service, key) as svc:
        r = svc.post("/v1/memories", json={"user_id": uid, "content": "Plays the cello"})
        assert r.status_code == 201


def test_only_admin_keys_manage_keys(service, keys):
    for key in (keys.service, keys.alice, keys.service_t2):
        with client_for(service, key) as c:
            assert c.get("/v1/admin/keys").status_code == 403
            r = c.post("/v1/admin/keys", json={"role": "service"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    with client_for(service, None) as anon:
        assert anon.get("/v1/admin/keys").status_code == 401


def test_admin_manages_only_its_tenant(service, admin, keys):
    listed = admin.get("/v1/admin/keys").json()["keys"]
    assert listed and all(k["tenant_id"] == "default" for k in listed)
    with psycopg.connect(service.dsn) as conn:
        t2_ids = [r[0] for r in conn.execute("SELECT id FROM api_keys WHERE tenant_id = 't2'")]
    assert t2_ids
    for kid in t2_ids:
        assert admin.get(f"/v1/admin/keys/{kid}").status_code == 404
        assert admin.delete(f"/v1/admin/keys/{kid}").status_code == 404
    with client_for(service, keys.service_t2) as t2:  # still works
        assert t2.get("/v1/memories", params={"user_id": "x"}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"role": "user"},
        {"role": "service", "user_id": "bob"},
        {"role": "admin"},
        {"role": "user", "user_id": "@org"},
        {"role": "service", "rate_limit_per_s": 0},
        {"role": "service", "tenant_id": "t2"},
    ],
)
def test_bad_key_requests(admin, body):
    assert admin.post("/v1/admin/keys", json=body).status_code == 422


def test_rate_limited_key_gets_429_with_retry_after(service, admin, uid):
    key = admin.post("/v1/admin/keys", json={"role": "service", "rate_limit_per_s": 0.5}).json()
    with client_for(service, key["key"]) as c:
        codes = [c.get("/v1/memories", params={"user_id": uid}).status_code for _ in range(4)]
        assert codes[0] == 200 and 429 in codes
        r = c.get("/v1/memories", params={"user_id": uid})
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert int(r.headers["retry-after"]) >= 1
        time.sleep(int(r.headers["retry-after"]))
        assert c.get("/v1/memories", params={"user_id": uid}).status_code == 200


def test_keys_never_logged(service, admin):
    key = admin.post("/v1/admin/keys", json={"role": "service"}).json()["key"]
    with client_for(service, key) as c:
        c.get("/v1/memories", params={"user_id": "x"})
    time.sleep(0.5)
    logs = service.tail(100_000) + "".join(
        p.read_text(errors="replace") for p in service.data_dir.rglob("*.log") if p.is_file()
    )
    assert key not in logs and key[12:] not in logs
