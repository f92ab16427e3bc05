"""The composition roots without Ray: real Postgres, the real ONNX encoder, the real retriever.

Routes reach every service through ``Depends``; the same app the Ingress serves
answers here over an in-process ASGI transport, and closing the services closes
what the root opened.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from serve_app import composition, language
from serve_app.api import create_app
from serve_app.bootstrap import ModelFacts, bootstrap
from serve_app.composition import build_worker
from serve_app.services.tenant_settings import tenant_service
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


def _embed_many(encoder):
    async def embed_many(texts: list[str], is_query: bool, ref: str | None, bulk: bool):
        return encoder.encode(texts, is_query=is_query)

    return embed_many


def _dispatching() -> bool:
    """The webhook dispatcher's thread runs."""
    return any(t.name == "webhook-dispatcher" for t in threading.enumerate())


def _others() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def test_worker_root_builds_every_role_and_closes_them(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    model = bootstrap(settings, fresh_db).model
    before = _others()
    language._identifier.cache_clear()  # loaded by whatever ran before in this process
    worker = await build_worker(settings, model, fresh_db, _embed_many(encoder))
    assert language._identifier.cache_info().currsize == 1  # at start, not on a first write
    status = worker.status()
    assert status["model"] == model.name and status["enabled"] is False  # no LLM configured
    assert _dispatching()
    assert len(_others() - before) >= 4  # scan, consolidation, spend upkeep, re-embed, ...
    worker.switch(model)  # a model switch rebuilds what writes vectors, and keeps running
    assert worker.scheduler.pipeline is worker.pipeline
    await worker.aclose()
    assert worker.pool.closed
    assert not _dispatching()
    await asyncio.sleep(0)
    assert not {t for t in _others() - before if not t.done()}  # nothing left running
    await worker.aclose()  # idempotent


async def test_worker_step_that_fails_closes_what_the_steps_before_it_opened(
    fresh_db, encoder, monkeypatch
):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    model = bootstrap(settings, fresh_db).model
    opened: dict[str, object] = {}
    real_open = composition.open_pool

    async def recording_pool(dsn, s):
        opened["pool"] = pool = await real_open(dsn, s)
        return pool

    def recording_tenants(*args, **kwargs):
        service, listener = tenant_service(*args, **kwargs)
        opened["listener"] = listener
        return service, listener

    class Broken:
        def __init__(self, *args, **kwargs) -> None:
            raise RuntimeError("the document job worker could not start")

    monkeypatch.setattr(composition, "open_pool", recording_pool)
    monkeypatch.setattr(composition, "tenant_service", recording_tenants)
    monkeypatch.setattr(composition, "DocumentJobWorker", Broken)
    before = _others()
    with pytest.raises(RuntimeError, match="could not start"):
        await build_worker(settings, model, fresh_db, _embed_many(encoder))
    assert opened["pool"].closed
    await asyncio.sleep(0)
    assert not {t for t in _others() - before if not t.done()}  # nothing left running
