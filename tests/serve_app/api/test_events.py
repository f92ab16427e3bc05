"""GET /v1/events in-process (no Ray): real Postgres and encoder behind the app. A user key
reads only its own user's events, a service key its tenant's; pages resume from the
cursor; bad input is a 422 that changes nothing; an import announces itself once (its
replayed history stays quiet); after a forget nothing of the user's content is left."""

from __future__ import annotations

import httpx
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.client import AsyncMemserveClient
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services

SERVICE = "msk_events_api_service_key_0123456789"


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE)
    boot = bootstrap(settings, fresh_db)
    async with in_process_services(settings, boot.model, fresh_db, encoder) as services:
        alice, _ = await services.keys.create("default", "user", user_id="alice")
        other, _ = await services.keys.create("acme", "service")
        async with in_process_app(settings, services) as app:
            clients = {
                name: bearer_client(app, key)
                for name, key in (("service", SERVICE), ("alice", alice), ("acme", other))
            }
            clients["app"] = app
            try:
                yield clients
            finally:
                for name, c in clients.items():
                    if name != "app":
                        await c.aclose()


async def remember(client, user: str, *texts: str) -> None:
    body = {"user_id": user, "items": [{"content": t, "infer": False} for t in texts]}
    r = await client.post("/v1/memories/batch", json=body)
    assert r.status_code in (200, 201), r.text


async def read_all(client, **params) -> list[dict]:
    out, after = [], None
    while True:
        extra = {"after": after} if after else {}
        r = await client.get("/v1/events", params={**params, "limit": 2, **extra})
        assert r.status_code == 200, r.text
        page = r.json()
        out.extend(page["events"])
        if not page["events"]:
            return out
        after = page["next_cursor"]


async def test_feed_isolation_paging_and_content(api):
    svc, alice, acme = api["service"], api["alice"], api["acme"]
    await remember(svc, "alice", "likes tea", "lives in Oslo")
    await remember(svc, "bob", "plays chess")
    await remember(acme, "zed", "acme's user")
    r = await svc.put(
        "/v1/facts", json={"user_id": "bob", "category": "game", "key": "fav", "value": "chess"}
    )
    assert r.status_code == 200, r.text

    tenant = await read_all(svc)
    assert [(e["type"], e["user_id"]) for e in tenant] == [
        ("memory.added", "alice"),
        ("memory.added", "alice"),
        ("memory.added", "bob"),
        ("fact.set", "bob"),
    ]
    assert all(e["content"] is None for e in tenant)  # not asked for
    assert [e["user_id"] for e in await read_all(alice)] == ["alice", "alice"]
    assert [e["user_id"] for e in await read_all(svc, user_id="bob")] == ["bob", "bob"]
    assert [e["user_id"] for e in await read_all(acme)] == ["zed"]
    with_content = await read_all(svc, include_content="true", types="fact.set,memory.added")
    assert [e["content"] for e in with_content] == [
        "likes tea",
        "lives in Oslo",
        "plays chess",
        "chess",
    ]
    assert [e["type"] for e in await read_all(svc, types="fact.set")] == ["fact.set"]

    # A user key may not read another user's events; junk is a clear 4xx.
    assert (await alice.get("/v1/events", params={"user_id": "bob"})).status_code == 403
    junk = [
        {"after": "nonsense"},
        {"types": "memory.eaten"},
        {"limit": 0},
        {"limit": 501},
        {"after": "1-2-3"},
        {"after": "99999999999999999999999-1"},  # past xid8: was a 500 from the cast
        {"after": f"{2**64}-1"},
    ]
    for params in junk:
        r = await svc.get("/v1/events", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["error"]["code"] == "invalid_request" or "detail" in r.text

    # The cursor of an empty page is the one passed in: a poller can keep it.
    last = (await svc.get("/v1/events", params={"limit": 500})).json()["next_cursor"]
    r = await svc.get("/v1/events", params={"after": last})
    assert r.json() == {"events": [], "next_cursor": last}


async def test_import_announces_once_and_forget_leaves_no_content(api):
    svc = api["service"]
    await remember(svc, "alice", "allergic to peanuts", "works as a nurse")
    export = await svc.get("/v1/export", params={"user_id": "alice"})
    assert export.status_code == 200
    before = len(await read_all(svc))
    r = await svc.post("/v1/import", params={"user_id": "alice2"}, content=export.text)
    assert r.status_code == 200, r.text
    imported = await read_all(svc, user_id="alice2")
    assert [e["type"] for e in imported] == ["memory.added", "memory.added", "import.completed"]
    assert imported[-1]["data"]["memories"] == 2
    assert len(await read_all(svc)) == before + 3  # the replayed history emitted nothing

    r = await svc.delete("/v1/memories", params={"user_id": "alice"})
    assert r.status_code == 200, r.text
    assert r.json()["removed"]["events"] == 2
    left = await read_all(svc, user_id="alice", include_content="true")
    assert [(e["type"], e["content"]) for e in left] == [("forget.completed", None)]
    everything = await read_all(svc, include_content="true")
    assert not any(
        "peanuts" in (e["content"] or "") and e["user_id"] == "alice" for e in everything
    )


async def test_python_client_reads_the_feed(api):
    svc = api["service"]
    await remember(svc, "alice", "likes tea")
    transport = httpx.ASGITransport(app=api["app"])
    async with AsyncMemserveClient("http://t", SERVICE, transport=transport) as client:
        page = await client.events(types=["memory.added"], include_content=True)
        again = await client.events(after=page.next_cursor)
    assert [e.content for e in page.events] == ["likes tea"]
    assert again.events == [] and again.next_cursor == page.next_cursor
