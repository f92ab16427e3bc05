"""End users signed in by their platform's identity provider, against the real service.

A real local issuer (keys generated here, its JWKS served over HTTP on 127.0.0.1) signs
tokens; a tenant's admin trusts it through the tenant settings; the tokens then act as
user keys on /v1, /mem0 (the official mem0ai client), /mcp (the MCP SDK) and through the
Python client's token provider. Keys keep working beside them.
"""

from __future__ import annotations

import os
import secrets

import httpx
import pytest

from serve_app.client import Forbidden, MemserveClient
from serve_app.testing.jwt_issuer import LocalIssuer
from tests.e2e.conftest import client_for
from tests.mcp_session import call, mcp_over_http, tool_error

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def issuer():
    server = LocalIssuer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def realm(service, issuer):
    """A tenant trusting the issuer: (tenant, audience, admin client, service key)."""
    tenant = "idp_" + secrets.token_hex(4)
    audience = "memserve-" + tenant
    admin_key = service.add_key("msk_" + secrets.token_hex(16), tenant, "admin")
    service_key = service.add_key("msk_" + secrets.token_hex(16), tenant, "service")
    with client_for(service, admin_key) as admin:
        r = admin.patch(
            "/v1/admin/tenant/settings",
            json={
                "identity": {
                    "issuers": [
                        issuer.config(audience, advertise=True),
                        issuer.config(
                            audience + "-ro",
                            scope_claim="scope",
                            write_scopes=["memory:write"],
                            read_scopes=["memory:read"],
                        ),
                    ]
                }
            },
        )
        assert r.status_code == 200, r.text
        yield tenant, audience, admin, service_key


def bearer(service, token: str) -> httpx.Client:
    return client_for(service, token)


def test_the_settings_refuse_what_no_issuer_may_be(realm, issuer, service):
    _, audience, admin, _ = realm
    bad = [
        issuer.config("x", algorithms=["HS256"]),  # a shared secret is not a signature
        issuer.config("x", jwks={"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}),
        {**issuer.config("x"), "jwks": issuer.jwks()},  # both a URL and inline keys
        issuer.config("x", jwks_url="file:///etc/passwd"),
        issuer.config("x", scope_claim="scope"),  # a scope claim maps nothing
    ]
    for entry in bad:
        r = admin.patch("/v1/admin/tenant/settings", json={"identity": {"issuers": [entry]}})
        assert r.status_code == 422, (entry, r.text)
    # The pair belongs to this tenant: another tenant cannot claim it.
    other = service.add_key("msk_" + secrets.token_hex(16), "idp_other", "admin")
    with client_for(service, other) as c:
        r = c.patch(
            "/v1/admin/tenant/settings", json={"identity": {"issuers": [issuer.config(audience)]}}
        )
        assert r.status_code == 409 and r.json()["error"]["code"] == "issuer_taken", r.text
        r = c.get("/v1/admin/tenant/settings")
        assert "identity" not in r.json()["settings"]  # nothing changed
    assert admin.get("/v1/admin/tenant/settings").json()["settings"]["identity"]["issuers"]


def test_a_token_acts_as_a_user_key_of_its_user(realm, issuer, service, uid):
    tenant, audience, _, service_key = realm
    with client_for(service, service_key) as svc:
        theirs = svc.post("/v1/memories", json={"user_id": "bob", "content": "Bob's PIN is 4321"})
        assert theirs.status_code == 201
    for alg in ("RS256", "ES256", "EdDSA"):
        with bearer(service, issuer.token(uid, audience, alg=alg)) as c:
            r = c.post("/v1/memories", json={"content": f"I keep bees ({alg})"})
            assert r.status_code == 201, r.text
            assert r.json()["user_id"] == uid
    with bearer(service, issuer.token(uid, audience)) as c:
        mine = c.get("/v1/memories").json()["memories"]
        assert {m["user_id"] for m in mine} == {uid} and len(mine) == 3
        hits = c.post("/v1/search", json={"query": "PIN code", "top_k": 10}).json()["results"]
        assert theirs.json()["id"] not in {h["id"] for h in hits}
        same = c.post("/v1/memories", json={"user_id": uid, "content": "same user"})
        assert same.status_code == 201
        r = c.post("/v1/memories", json={"user_id": "bob", "content": "as bob"})
        assert r.status_code == 403, r.text
        assert c.get("/v1/memories", params={"user_id": "bob"}).status_code == 403
        assert c.get(f"/v1/memories/{theirs.json()['id']}").status_code == 404
    # Keys keep working, and see the token user's memories as that user's.
    with client_for(service, service_key) as svc:
        listed = svc.get("/v1/memories", params={"user_id": uid}).json()["memories"]
        assert len(listed) == 4


def test_quotas_apply_to_token_users(realm, issuer, service, uid):
    _, audience, admin, _ = realm
    r = admin.patch("/v1/admin/tenant/settings", json={"quotas": {"max_memories_per_user": 1}})
    assert r.status_code == 200
    try:
        with bearer(service, issuer.token(uid, audience)) as c:
            assert c.post("/v1/memories", json={"content": "first"}).status_code == 201
            r = c.post("/v1/memories", json={"content": "second"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded"
    finally:
        admin.patch("/v1/admin/tenant/settings", json={"quotas": None})


def test_a_read_only_token_reads_but_never_writes(realm, issuer, service, uid):
    _, audience, _, _ = realm
    with bearer(service, issuer.token(uid, audience)) as c:
        added = c.post("/v1/memories", json={"content": "I like tea"}).json()
    ro = issuer.token(uid, audience + "-ro", scope="openid memory:read")
    with bearer(service, ro) as c:
        assert c.post("/v1/search", json={"query": "tea"}).json()["results"][0]["id"] == added["id"]
        assert c.post("/v1/context", json={"query": "tea"}).status_code == 200
        assert c.get("/v1/memories").status_code == 200
        refused = [
            c.post("/v1/memories", json={"content": "x"}),
            c.delete(f"/v1/memories/{added['id']}"),
            c.delete("/v1/memories"),
            c.patch(f"/v1/memories/{added['id']}", json={"content": "y"}),
            c.post("/v1/import", content=b"{}\n"),
            c.post("/mem0/v3/memories/add/", json={"messages": [{"role": "user", "content": "x"}]}),
        ]
        assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    rw = issuer.token(uid, audience + "-ro", scope="memory:read memory:write")
    with bearer(service, rw) as c:
        assert c.post("/v1/memories", json={"content": "scoped write"}).status_code == 201
    none = issuer.token(uid, audience + "-ro", scope="openid profile")
    with bearer(service, none) as c:
        assert c.get("/v1/memories").status_code == 401
    with bearer(service, issuer.token(uid, audience)) as c:
        assert len(c.get("/v1/memories").json()["memories"]) == 2  # nothing else changed


def test_the_python_client_refreshes_through_its_token_provider(realm, issuer, service, uid):
    _, audience, _, _ = realm
    handed: list[str] = []

    def provider() -> str:
        # The first token is already expired: the client must ask again after the 401.
        life = -120 if not handed else 600
        handed.append(issuer.sign(issuer.claims(uid, audience, lifetime_s=life)))
        return handed[-1]

    with MemserveClient(service.base_url, token_provider=provider) as m:
        memory = m.add("I run marathons")
        assert memory.user_id == uid and len(handed) == 2
        assert m.search("sports").results[0].id == memory.id
        with pytest.raises(Forbidden):
            m.add("as bob", user_id="bob")


def test_the_mem0_client_signs_in_with_a_token(realm, issuer, service, uid, tmp_path):
    _, audience, _, _ = realm
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(tmp_path)
    import mem0

    c = mem0.MemoryClient(api_key=issuer.token(uid, audience), host=f"{service.base_url}/mem0")
    added = c.add([{"role": "user", "content": "I am vegetarian"}], user_id=uid, infer=False)
    assert added["results"][0]["memory"] == "I am vegetarian"
    hits = c.search("what do I eat?", filters={"user_id": uid})["results"]
    assert hits[0]["user_id"] == uid
    with pytest.raises(Exception, match="403|forbidden|own user"):
        c.search("anything", filters={"user_id": "bob"})


async def test_mcp_discovery_and_a_token_on_mcp(realm, issuer, service, uid):
    tenant, audience, _, _ = realm
    endpoint = f"{service.base_url}/mcp/{tenant}"
    async with httpx.AsyncClient(base_url=service.base_url) as h:
        r = await h.post(f"/mcp/{tenant}", json={})
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        assert challenge.startswith("Bearer resource_metadata=")
        url = challenge.split('"')[1]
        assert url == f"{service.base_url}/.well-known/oauth-protected-resource/mcp/{tenant}"
        meta = (await h.get(url)).json()
        assert meta["resource"] == endpoint
        assert meta["authorization_servers"] == [issuer.issuer]  # this tenant's, no other's
        # The shared documents list no tenant's sign-in server (any tenant admin could
        # otherwise put its own first for everyone).
        for shared in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
        ):
            assert (await h.get(shared)).json()["authorization_servers"] == []
    async with mcp_over_http(endpoint, issuer.token(uid, audience)) as s:
        added = await call(s, "add_memory", content="I sail on weekends")
        assert added["user_id"] == uid
        hits = await call(s, "search_memories", query="hobbies")
        assert hits["results"][0]["id"] == added["id"]
        assert "forbidden" in await tool_error(s, "list_memories", user_id="bob")
