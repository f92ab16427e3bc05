"""Issue 29 in-process (no Ray; real Postgres and encoder behind the app): profile classes
given at write time, GET /v1/users/{id}/profile and its isolation, pinned overrides,
forget/supersede in the next block, one encoder batch for a message's parts."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_clients, in_process_app, in_process_services

SERVICE = "msk_profile_api_service_key_0123456789"


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE)
    settings.retrieval.query_embed = "embedder"  # query texts reach ``embedded`` below
    boot = bootstrap(settings, fresh_db)
    embedded: list[tuple[list[str], bool]] = []
    async with in_process_services(
        settings, boot.model, fresh_db, encoder, embedded=embedded
    ) as services:
        alice, _ = await services.keys.create("default", "user", user_id="alice")
        keys = {"service": SERVICE, "alice": alice}
        async with (
            in_process_app(settings, services) as app,
            bearer_clients(app, keys) as clients,
        ):
            yield clients, embedded


async def add(client, user: str, content: str, **extra) -> dict:
    r = await client.post("/v1/memories", json={"user_id": user, "content": content, **extra})
    assert r.status_code == 201, r.text
    return r.json()


async def context(client, user: str, query: str) -> dict:
    r = await client.post("/v1/context", json={"user_id": user, "query": query})
    assert r.status_code == 200, r.text
    return r.json()


async def test_profile_classes_route_and_block(api):
    (c, embedded) = api
    svc = c["service"]
    nut = await add(svc, "bob", "I'm allergic to peanuts", type="fact")
    rule = await add(svc, "bob", "Always answer me in short bullet points")
    city = await add(svc, "bob", "Lives in Oslo near the fjord")
    tea = await add(svc, "bob", "Loves green tea, especially sencha")
    r = await svc.get("/v1/users/bob/profile")
    assert r.status_code == 200, r.text
    got = {m["id"]: m for m in r.json()["memories"]}
    assert got[nut["id"]]["profile_class"] == "constraint"
    assert got[rule["id"]]["profile_class"] == "instruction"
    assert got[city["id"]]["why"] == "profile: identity" and tea["id"] not in got
    assert r.json()["memories"][0]["id"] == rule["id"]  # instructions first
    block = await context(svc, "bob", "Can you suggest a recipe for dinner tonight?")
    assert {nut["id"], rule["id"], city["id"]} <= {p["id"] for p in block["profile"]}
    assert block["context"].index("About the user") < block["context"].index("peanuts")
    assert tea["id"] not in {m["id"] for m in block["memories"]}
    assert 0 < block["profile_tokens"] <= 1000 // 4


async def test_profile_isolation_and_validation(api):
    (c, _) = api
    await add(c["service"], "bob", "I'm vegan")
    assert (await c["alice"].get("/v1/users/bob/profile")).status_code in (403, 404)
    assert (await c["alice"].get("/v1/users/alice/profile")).json()["memories"] == []
    assert (await c["service"].get("/v1/users/bad%20id/profile")).status_code == 422
    r = await c["service"].post(
        "/v1/memories", json={"user_id": "bob", "content": "x", "pinned": "maybe"}
    )
    assert r.status_code == 422


async def test_pinned_forget_and_supersede_reach_the_next_block(api):
    (c, _) = api
    svc = c["service"]
    nut = await add(svc, "carol", "I'm allergic to peanuts")
    course = await add(svc, "carol", "Started a Spanish course on Tuesdays", pinned=True)
    city = await add(svc, "carol", "Lives in Oslo")

    async def profile() -> set[str]:
        return {p["id"] for p in (await context(svc, "carol", "Plan my weekend"))["profile"]}

    assert {nut["id"], course["id"], city["id"]} <= await profile()
    r = await svc.patch(
        f"/v1/memories/{nut['id']}", params={"user_id": "carol"}, json={"pinned": False}
    )
    assert r.status_code == 200, r.text
    assert nut["id"] not in await profile()
    r = await svc.patch(
        f"/v1/memories/{nut['id']}", params={"user_id": "carol"}, json={"pinned": None}
    )
    assert r.status_code == 200, r.text
    assert nut["id"] in await profile()  # automatic again: its class decides
    r = await svc.delete(f"/v1/memories/{course['id']}", params={"user_id": "carol"})
    assert r.status_code == 204
    moved = await add(svc, "carol", "Lives in Bergen now", supersedes=[city["id"]])
    now = await profile()
    assert course["id"] not in now and city["id"] not in now and moved["id"] in now


async def test_parts_go_in_one_encoder_batch_and_small_talk_searches_nothing(api):
    (c, embedded) = api
    svc = c["service"]
    bakery = await add(svc, "dan", "Favourite bakery is Apent on Grunerlokka")
    await add(svc, "dan", "Lives in Oslo")
    embedded.clear()
    block = await context(svc, "dan", "What city am I in? Any good bakeries around?")
    queries = [texts for texts, is_query in embedded if is_query]
    assert len(queries) == 1 and len(queries[0]) == 3 == len(block["parts"])
    assert bakery["id"] in {m["id"] for m in block["memories"]}
    assert all(m["why"] for m in block["memories"])
    embedded.clear()
    small = await context(svc, "dan", "Thanks, that helps a lot!")
    assert small["memories"] == [] and small["search_query"] is None and small["profile"]
    assert not [t for t, q in embedded if q]
