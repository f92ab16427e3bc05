"""The composition root without Ray: real Postgres, the real ONNX encoder, the real retriever.

Routes reach every service through ``Depends``; the same app the Ingress serves
answers here over an in-process ASGI transport, and closing the services closes
what the root opened.
"""

from __future__ import annotations

import httpx
import pytest

from serve_app.api import create_app
from serve_app.bootstrap import ModelFacts, bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api, running

KEY = "msk_composition_test_key_0123456789"


@pytest.fixture
async def stack(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    assert boot.generated_key is None  # the configured key was seeded, none minted

    async def probe() -> str:
        return "ok (in-process)"

    probes = {"embedder": probe}
    api = in_process_api(settings, boot.model, fresh_db, encoder, KEY, probes)
    async with api as (c, services):
        yield c, services, boot.model


async def test_bootstrap_model_facts_match_the_encoder(stack, encoder):
    _, _, model = stack
    assert model == ModelFacts.of(encoder.spec)  # ref: the spec name; nothing filling


async def test_routes_run_on_the_services_without_ray(stack):
    client, _, _ = stack
    r = await client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json()["components"] == {"database": "ok", "embedder": "ok (in-process)"}
    r = await client.post(
        "/v1/memories/batch",
        json={
            "user_id": "alice",
            "items": [
                {"content": "My daughter Mia starts violin lessons on Thursdays"},
                {"content": "I am allergic to peanuts"},
            ],
        },
    )
    assert r.status_code == 201, r.text
    ids = [m["id"] for m in r.json()["memories"]]
    r = await client.post(
        "/v1/search", json={"user_id": "alice", "query": "when is the kid's music class?"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["id"] == ids[0]
    r = await client.post("/v1/search", json={"user_id": "bob", "query": "violin"})
    assert r.json()["results"] == []
    r = await client.get(f"/v1/memories/{ids[1]}", params={"user_id": "bob"})
    assert r.status_code == 404
    r = await client.post(
        "/v1/sessions/s1/turns",
        json={"user_id": "alice", "messages": [{"role": "user", "content": "hi there"}]},
    )
    assert r.status_code == 202, r.text
    r = await client.get("/v1/sessions/s1", params={"user_id": "alice"})
    assert r.status_code == 200, r.text
    assert r.json()["turns"] == 1 and r.json()["pending_turns"] == 1
    r = await client.post("/v1/context", json={"user_id": "alice", "query": "what about food?"})
    assert r.status_code == 200, r.text
    assert "peanuts" in r.json()["context"]


async def test_unknown_key_is_401_before_any_service_work(stack):
    client, _, _ = stack
    r = await client.post(
        "/v1/search",
        json={"user_id": "alice", "query": "x"},
        headers={"Authorization": "Bearer msk_nope"},
    )
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"


async def test_aclose_closes_what_the_root_opened(stack):
    _, services, _ = stack
    pool = services.memories.store.pool
    chat_http = services.chat.http  # opened lazily; must be closed with the rest
    await services.aclose()
    assert pool.closed
    assert chat_http.is_closed
    await services.aclose()  # idempotent


async def test_app_without_services_answers_503():
    async with (
        running(create_app(Settings())) as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
    ):
        r = await c.post("/v1/search", json={"user_id": "a", "query": "x"})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "unavailable"
