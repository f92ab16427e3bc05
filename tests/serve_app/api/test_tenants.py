"""/v1/admin/tenant/settings in-process (no Ray): real Postgres, encoder and retriever
behind the app, the scripted fake LLM as the chat upstream. Admin keys only; a tenant's
value wins over the environment's for that tenant alone; bad input is a 4xx that
changes nothing; rate limits and chat models follow the settings at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_clients, in_process_app, in_process_services

SERVICE = "msk_tenant_api_service_key_0123456789"
ADMIN = "msk_tenant_api_admin_key_0123456789ab"
URL = "/v1/admin/tenant/settings"


@pytest.fixture
async def api(fresh_db, encoder, llm):
    """(clients by name, services): the default tenant's admin and service keys, and
    tenant acme's (created the way `tenant create` does)."""
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE, admin_key=ADMIN).with_(
        llm={"base_url": llm.url, "model": "fake"},
        quota={"max_memories_per_user": 50},
    )
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        assert await services.tenants.store.create("acme")
        acme_admin, _ = await services.keys.create("acme", "admin")
        acme_service, _ = await services.keys.create("acme", "service")
        acme_user, _ = await services.keys.create("acme", "user", user_id="u1")
        keys = {
            "admin": ADMIN,
            "service": SERVICE,
            "acme_admin": acme_admin,
            "acme_service": acme_service,
            "acme_user": acme_user,
        }
        async with bearer_clients(app, keys) as clients:
            yield clients, services


async def test_only_admin_keys_and_only_their_own_tenant(api):
    c, _ = api
    for name in ("service", "acme_service", "acme_user"):
        for method, path in (("GET", URL), ("GET", URL + "/history")):
            r = await c[name].request(method, path)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
        r = await c[name].patch(URL, json={"chat_models": ["x"]})
        assert r.status_code == 403, r.text
        r = await c[name].put(URL, json={"chat_models": ["x"]})
        assert r.status_code == 403, r.text
    acme = (await c["acme_admin"].get(URL)).json()
    assert acme["tenant_id"] == "acme" and acme["version"] == 0 and acme["settings"] == {}
    assert acme["effective"]["quotas"]["max_memories_per_user"] == 50  # the environment's
    assert acme["effective"]["chat_models"] == ["fake"]

    r = await c["acme_admin"].patch(URL, json={"quotas": {"max_memories_per_user": 2}})
    assert r.status_code == 200, r.text
    assert r.json()["effective"]["quotas"]["max_memories_per_user"] == 2
    mine = (await c["admin"].get(URL)).json()  # the default tenant: untouched
    assert mine["tenant_id"] == "default" and mine["version"] == 0
    assert mine["effective"]["quotas"]["max_memories_per_user"] == 50


async def test_bad_input_is_a_4xx_that_changes_nothing_and_history_audits(api):
    c, services = api
    admin = c["acme_admin"]
    for body in (
        {"quotas": {"max_memories_per_user": "2"}},
        {"quotas": {"max_memories_per_user": -1}},
        {"quota": {}},
        {"retention": {"episodic": -5}},
        {"chat_models": []},
        {"extraction": {"custom_categories": {"travel": "trips"}}},
    ):
        for method in ("PUT", "PATCH"):
            r = await admin.request(method, URL, json=body)
            assert r.status_code == 422, (method, body, r.text)
            assert r.json()["error"]["code"] == "invalid_request", r.text
    r = await admin.patch(URL, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = await admin.patch(URL, json=["not", "an", "object"])
    assert r.status_code == 422, r.text
    assert (await admin.get(URL)).json()["version"] == 0

    r = await admin.put(URL, json={"extraction": {"excludes": "health"}})
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
    r = await admin.patch(
        URL,
        json={"chat_models": ["m"], "extraction": {"excludes": None}},
        headers={"If-Match": '"1"'},
    )
    assert r.status_code == 200 and r.json()["settings"] == {"chat_models": ["m"]}, r.text
    stale = await admin.put(URL, json={"chat_models": ["n"]}, headers={"If-Match": '"1"'})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
    assert (await admin.get(URL)).json()["settings"] == {"chat_models": ["m"]}

    history = (await admin.get(URL + "/history")).json()["changes"]
    assert [h["version"] for h in history] == [2, 1]
    key_id = next(k["id"] for k in await services.keys.list("acme") if k["role"] == "admin")
    assert history[0]["changed_by"] == str(key_id) and history[0]["actor"] == f"admin:{key_id}"
    assert history[0]["changes"] == [
        {"field": "chat_models", "old": None, "new": ["m"]},
        {"field": "extraction.excludes", "old": "health", "new": None},
    ]
    assert history[1]["old"] == {} and history[1]["new"] == {"extraction": {"excludes": "health"}}
    page = (await admin.get(URL + "/history", params={"before": 2})).json()["changes"]
    assert [h["version"] for h in page] == [1]
    assert (await c["admin"].get(URL + "/history")).json()["changes"] == []  # not acme's


async def test_chat_models_follow_the_tenants_list(api, llm):
    c, _ = api
    ask = {"user": "ann", "messages": [{"role": "user", "content": "hi"}]}
    assert (await c["acme_service"].post("/v1/chat/completions", json=ask)).status_code == 200
    r = await c["acme_admin"].patch(URL, json={"chat_models": ["small-model", "big-model"]})
    assert r.status_code == 200, r.text

    r = await c["acme_service"].post("/v1/chat/completions", json={**ask, "model": "fake"})
    assert r.status_code == 422 and "not allowed" in r.json()["error"]["message"], r.text
    assert "big-model, small-model" in r.json()["error"]["message"]
    r = await c["acme_service"].post("/v1/chat/completions", json={**ask, "model": "big-model"})
    assert r.status_code == 200, r.text
    assert llm.calls("chat")[-1]["body"]["model"] == "big-model"
    r = await c["acme_service"].post("/v1/chat/completions", json=ask)  # none named
    assert r.status_code == 200 and llm.calls("chat")[-1]["body"]["model"] == "big-model"
    # another tenant keeps the environment's list
    r = await c["service"].post("/v1/chat/completions", json={**ask, "model": "big-model"})
    assert r.status_code == 422, r.text
    assert (await c["service"].post("/v1/chat/completions", json=ask)).status_code == 200


async def test_rate_limits_follow_the_tenants_settings(api):
    c, _ = api
    body = {"user_id": "ann", "query": "anything"}
    for _ in range(5):
        assert (await c["acme_service"].post("/v1/search", json=body)).status_code == 200
    r = await c["acme_admin"].patch(URL, json={"rate_limits": {"per_user_per_s": 0.5}})
    assert r.status_code == 200, r.text
    codes = [(await c["acme_service"].post("/v1/search", json=body)).status_code for _ in range(4)]
    assert 429 in codes, codes
    refused = await c["acme_service"].post("/v1/search", json=body)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    # the default tenant's keys keep the environment's rate
    for _ in range(5):
        assert (await c["service"].post("/v1/search", json=body)).status_code == 200
    # per key: the aggregate over all end users
    await c["acme_admin"].patch(
        URL, json={"rate_limits": {"per_user_per_s": None, "per_key_per_s": 0.5}}
    )
    codes = [
        (await c["acme_user"].post("/v1/search", json={"query": "x"})).status_code for _ in range(4)
    ]
    assert 429 in codes, codes


async def test_quotas_and_retention_follow_the_tenants_settings(api):
    c, _ = api
    svc = c["acme_service"]

    async def add(client, user: str, content: str, **extra):
        return await client.post(
            "/v1/memories", json={"user_id": user, "content": content, **extra}
        )

    r = await c["acme_admin"].patch(
        URL,
        json={
            "quotas": {"max_memories_per_user": 2, "max_facts_per_user": 1},
            "retention": {"semantic": 600},
        },
    )
    assert r.status_code == 200, r.text
    first = await add(svc, "ann", "Ann likes tea")
    assert first.status_code == 201, first.text
    left = datetime.fromisoformat(first.json()["expires_at"]) - datetime.now(UTC)
    assert timedelta(seconds=590) < left <= timedelta(seconds=600)  # the tenant's retention
    explicit = await add(svc, "ann", "Ann parks at 3", ttl_s=60)  # the write's own expiry wins
    left = datetime.fromisoformat(explicit.json()["expires_at"]) - datetime.now(UTC)
    assert left <= timedelta(seconds=60)
    over = await add(svc, "ann", "Ann likes coffee too")
    assert over.status_code == 403 and over.json()["error"]["code"] == "quota_exceeded", over.text
    fact = {"user_id": "ann", "category": "pet", "key": "cat", "value": "Tom"}
    assert (await svc.put("/v1/facts", json=fact)).status_code == 200
    assert (await svc.put("/v1/facts", json={**fact, "value": "Tim"})).status_code == 200
    r = await svc.put("/v1/facts", json={**fact, "key": "dog", "value": "Rex"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded", r.text

    # the default tenant keeps the environment's quota (50) and keeps memories forever
    for i in range(3):
        r = await add(c["service"], "ann", f"Default ann fact {i}")
        assert r.status_code == 201 and r.json()["expires_at"] is None, r.text

    # back to the environment's quota: the very next add passes
    r = await c["acme_admin"].patch(URL, json={"quotas": None})
    assert r.status_code == 200, r.text
    assert (await add(svc, "ann", "Ann likes coffee too")).status_code == 201


async def test_rates_below_the_key_floor_are_refused_and_admin_keys_stay_reachable(api):
    """1e-300 locked every key of the tenant out (its admin key too); 5e-324 made every
    request a 500 (an infinite Retry-After). Tenant rates now take the keys' floor, and
    admin keys are charged at the environment's rates whatever their tenant set."""
    c, _ = api
    admin = c["acme_admin"]
    for rate in (1e-300, 5e-324, 0.0009):
        for group in ("per_user_per_s", "per_key_per_s"):
            for method in ("PUT", "PATCH"):
                r = await admin.request(method, URL, json={"rate_limits": {group: rate}})
                assert r.status_code == 422, (rate, group, method, r.text)
                assert r.json()["error"]["code"] == "invalid_request", r.text
                assert group in r.text
    assert (await admin.get(URL)).json()["version"] == 0
    off = await admin.patch(URL, json={"rate_limits": {"per_key_per_s": 0}})  # 0: off
    assert off.status_code == 200, off.text

    slowest = {"rate_limits": {"per_user_per_s": 0.001, "per_key_per_s": 0.001}}
    assert (await admin.patch(URL, json=slowest)).status_code == 200
    body = {"user_id": "ann", "query": "anything"}
    codes = [(await c["acme_service"].post("/v1/search", json=body)).status_code for _ in range(3)]
    assert codes[-1] == 429, codes
    refused = await c["acme_service"].post("/v1/search", json=body)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    for _ in range(20):  # the tenant's admin is not throttled by its own tenant's rates
        assert (await admin.get(URL)).status_code == 200
    back = await admin.patch(URL, json={"rate_limits": None})
    assert back.status_code == 200 and back.json()["settings"] == {}, back.text


async def test_the_first_change_of_a_never_configured_tenant_may_name_the_version_it_read(api):
    """GET says version 0 for a tenant that never set anything; the console sends that back
    as If-Match, which the API refused, so its first settings change always failed."""
    c, _ = api
    for name, etag in (("admin", '"0"'), ("acme_admin", 'W/"0"')):  # the console's; weak
        admin = c[name]
        shown = (await admin.get(URL)).json()
        assert shown["version"] == 0 and shown["settings"] == {}
        r = await admin.patch(URL, json={"chat_models": ["m"]}, headers={"If-Match": etag})
        assert r.status_code == 200 and r.json()["version"] == 1, (name, r.text)
        # configured now (even once it is empty again): "0" no longer matches
        assert (await admin.put(URL, json={})).json()["version"] == 2
        stale = await admin.patch(URL, json={"chat_models": ["n"]}, headers={"If-Match": "0"})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "conflict"
        for bad in ('"-1"', '"abc"', '"0x"'):
            r = await admin.patch(URL, json={"chat_models": ["x"]}, headers={"If-Match": bad})
            assert r.status_code == 422, (bad, r.text)
        after = (await admin.get(URL)).json()
        assert after["version"] == 2 and after["settings"] == {}  # the 4xx changed nothing
