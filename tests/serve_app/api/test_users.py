"""GET /v1/users, GET /v1/users/{id}/sessions, /console and search ``explain``, in-process
(no Ray): real Postgres and encoder behind the app. A user key sees only its user, a
service key only its tenant; pages follow the cursor; the console needs no key."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import (
    bearer_client,
    bearer_clients,
    in_process_app,
    in_process_services,
)

SERVICE = "msk_users_api_service_key_0123456789"

TURNS_SQL = (
    "INSERT INTO session_turns (tenant_id, user_id, session_id, turn_index, role, content,"
    " extracted_at, dead_at) VALUES (%s, %s, %s, %s, 'user', 'hi', %s, %s)"
)


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE)
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        alice, _ = await services.keys.create("default", "user", user_id="alice")
        other, _ = await services.keys.create("acme", "service")
        keys = {"service": SERVICE, "alice": alice, "acme": other}
        async with bearer_clients(app, keys) as clients:
            yield clients, services, fresh_db


async def _remember(client, user: str, *texts: str) -> list[dict]:
    body = {"user_id": user, "items": [{"content": t, "infer": False} for t in texts]}
    r = await client.post("/v1/memories/batch", json=body)
    assert r.status_code in (200, 201), r.text
    return r.json()["memories"]


async def test_users_counts_pages_and_isolation(api):
    clients, services, _ = api
    svc = clients["service"]
    await _remember(svc, "alice", "likes tea", "lives in Oslo")
    bob = await _remember(svc, "bob", "plays chess")
    await _remember(svc, "carol", "owns a cat")
    await _remember(clients["acme"], "zed", "acme's user")
    r = await svc.patch(
        f"/v1/memories/{bob[0]['id']}", params={"user_id": "bob"}, json={"status": "archived"}
    )
    assert r.status_code == 200, r.text
    r = await svc.put(
        "/v1/facts", json={"user_id": "bob", "category": "profile", "key": "city", "value": "Rome"}
    )
    assert r.status_code in (200, 201), r.text

    users = (await svc.get("/v1/users")).json()
    by_id = {u["user_id"]: u for u in users["users"]}
    assert list(by_id) == ["alice", "bob", "carol"]  # by id; never acme's zed
    assert by_id["alice"]["memories"] == 2 and by_id["bob"]["memories"] == 0
    assert by_id["bob"]["archived"] == 1 and by_id["bob"]["facts"] == 1
    assert by_id["alice"]["last_activity"] is not None and users["next_cursor"] is None

    first = (await svc.get("/v1/users", params={"limit": 2})).json()
    assert [u["user_id"] for u in first["users"]] == ["alice", "bob"]
    rest = (await svc.get("/v1/users", params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert [u["user_id"] for u in rest["users"]] == ["carol"] and rest["next_cursor"] is None

    mine = (await clients["alice"].get("/v1/users")).json()
    assert [u["user_id"] for u in mine["users"]] == ["alice"]
    acme = (await clients["acme"].get("/v1/users")).json()
    assert [u["user_id"] for u in acme["users"]] == ["zed"]


async def test_sessions_show_pending_extracted_and_dead_turns(api):
    clients, services, dsn = api
    now = datetime.now(UTC)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for i, (done, dead) in enumerate([(True, False), (False, False), (False, True)]):
            row = ("default", "alice", "s1", i + 1, now if done else None, now if dead else None)
            await conn.execute(TURNS_SQL, row)
        await conn.execute(TURNS_SQL, ("acme", "alice", "s9", 1, None, None))
    got = (await clients["service"].get("/v1/users/alice/sessions")).json()["sessions"]
    assert [s["session_id"] for s in got] == ["s1"]  # never acme's alice's session
    s = got[0]
    assert (s["turns"], s["extracted_turns"], s["pending_turns"], s["dead_turns"]) == (3, 1, 1, 1)
    assert s["ended"] is False
    users = (await clients["service"].get("/v1/users")).json()["users"]
    assert users == [
        {**users[0], "user_id": "alice", "sessions": 1, "pending_turns": 1, "dead_turns": 1}
    ]
    assert (await clients["alice"].get("/v1/users/alice/sessions")).status_code == 200
    r = await clients["alice"].get("/v1/users/bob/sessions")
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"


async def test_bad_paging_is_a_clear_4xx(api):
    clients, _, _ = api
    svc = clients["service"]
    for params in ({"limit": 0}, {"limit": 100000}, {"cursor": "a b"}, {"limit": "x"}):
        r = await svc.get("/v1/users", params=params)
        assert r.status_code == 422 and r.json()["error"]["code"], (params, r.text)
    assert (await svc.get("/v1/users/bad id/sessions")).status_code in (404, 422)


async def test_search_explain_over_http(api):
    clients, _, _ = api
    svc = clients["service"]
    await _remember(svc, "alice", "the zebra crossing near the station", "likes green tea")
    body = {"user_id": "alice", "query": "zebra crossing"}
    plain = (await svc.post("/v1/search", json=body)).json()["results"]
    assert plain and all("explain" not in r for r in plain)
    got = (await svc.post("/v1/search", json={**body, "explain": True})).json()["results"]
    assert [r["id"] for r in got] == [r["id"] for r in plain]
    e = got[0]["explain"]
    assert e["final"] == pytest.approx(got[0]["score"])
    assert {"similarity", "lexical", "importance", "recency", "time", "expansion"} <= set(e)


async def test_console_is_served_without_a_key(api):
    clients, _, _ = api
    app_client = clients["service"]
    async with bearer_client(app_client._transport.app, "") as anon:  # noqa: SLF001
        anon.headers.pop("Authorization")
        r = await anon.get("/console/")
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert (await anon.get("/console")).headers["location"].endswith("/console/")
        assert (await anon.get("/console/app.js")).status_code == 200
        for escape in ("/console/..%2fapi%2fapp.py", "/console/%2e%2e/api/app.py"):
            r = await anon.get(escape)
            assert r.status_code in (401, 404) and "import" not in r.text  # nothing outside
        assert (await anon.get("/v1/users")).status_code == 401  # the API still needs one
