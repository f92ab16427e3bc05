"""``explain`` on /v1/context in-process (no Ray; real Postgres, encoder, retriever):
the candidates the block left out, each with the rule that did (gate, top_k, budget,
profile), through POST and GET; every shown item keeps its ``why``."""

from __future__ import annotations

import httpx
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.client import AsyncMemserveClient
from serve_app.client.errors import InvalidRequest
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services

SERVICE = "msk_context_explain_service_key_012345"
QUERY = "Which winter tires fit my red Tesla Model 3?"
CAR = [
    "My car is a red Tesla Model 3",
    "I bought winter tires for my Tesla Model 3 last year",
    "My red Tesla Model 3 is parked in the garage",
]
WEEKDAYS = "My car is parked in the office garage on weekdays"
GATED_QUERY = "What should I know about my car?"


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE)
    boot = bootstrap(settings, fresh_db)
    services_cm = in_process_services(settings, boot.model, fresh_db, encoder)
    async with services_cm as services, in_process_app(settings, services) as app:
        svc = bearer_client(app, SERVICE)
        try:
            ids = {}
            for text in [*CAR, WEEKDAYS]:
                r = await svc.post("/v1/memories", json={"user_id": "carl", "content": text})
                assert r.status_code == 201, r.text
                ids[text] = r.json()["id"]
            typed = AsyncMemserveClient("http://t", SERVICE, transport=httpx.ASGITransport(app))
            yield svc, ids, typed
        finally:
            await svc.aclose()
            await typed.aclose()


async def context(svc, **extra) -> dict:
    body = {"user_id": "carl", "query": QUERY, "explain": True, **extra}
    r = await svc.post("/v1/context", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def shown_ids(out: dict) -> set[str]:
    return {i["id"] for k in ("memories", "profile", "facts", "knowledge") for i in out[k]}


async def test_explain_names_the_rule_that_left_each_candidate_out(api):
    svc, ids, _ = api
    full = await context(svc)
    assert full["left_out"] == [] and {ids[t] for t in CAR} <= shown_ids(full)
    assert all(m["why"] for k in ("memories", "profile") for m in full[k])
    # top_k: the best memory shown, the next candidate left out by the cut
    top = await context(svc, top_k=1)
    assert [m["id"] for m in top["memories"]] == [ids[CAR[1]]]
    assert {(x["id"], x["rule"], x["detail"]) for x in top["left_out"]} == {
        (ids[CAR[0]], "top_k", "past top_k=1")
    }
    # budget: what the token budget had no room for, in rank order
    tight = await context(svc, token_budget=60)
    assert [m["id"] for m in tight["memories"]] == [ids[CAR[1]]]
    assert [(x["id"], x["rule"]) for x in tight["left_out"]] == [
        (ids[CAR[0]], "budget"),
        (ids[CAR[2]], "budget"),
    ]
    assert not shown_ids(tight) & {x["id"] for x in tight["left_out"]}


async def test_explain_shows_a_gated_miss_through_get(api):
    svc, ids, _ = api
    params = {"user_id": "carl", "query": GATED_QUERY, "explain": "true"}
    r = await svc.get("/v1/context", params=params)
    assert r.status_code == 200, r.text
    out = r.json()
    gated = {x["id"]: x for x in out["left_out"] if x["rule"] == "gate"}
    assert ids[WEEKDAYS] in gated and ids[WEEKDAYS] not in shown_ids(out)
    assert gated[ids[WEEKDAYS]]["detail"].startswith("no evidence from the message (best cosine")
    assert gated[ids[WEEKDAYS]]["similarity"] < 0.35  # under the gate's similarity
    # without explain: nothing extra is computed or returned
    plain = await svc.get("/v1/context", params={"user_id": "carl", "query": GATED_QUERY})
    assert plain.status_code == 200 and plain.json()["left_out"] is None
    assert [m["id"] for m in plain.json()["memories"]] == [m["id"] for m in out["memories"]]


async def test_get_context_validates_like_post(api):
    svc, *_ = api
    base = {"user_id": "carl", "query": QUERY}
    for bad in ({"token_budget": 0}, {"top_k": "x"}, {"explain": "maybe"}, {"history": "[]"}):
        r = await svc.get("/v1/context", params={**base, **bad})
        assert r.status_code == 422, (bad, r.text)
    assert (await svc.get("/v1/context", params={"user_id": "carl"})).status_code == 422


async def test_the_client_explains_and_reranks_through_get_and_post(api):
    _, ids, typed = api
    out = await typed.explain_context(GATED_QUERY, user_id="carl")
    assert ids[WEEKDAYS] in {str(x.id) for x in out.left_out}
    posted = await typed.context(GATED_QUERY, user_id="carl", explain=True)
    assert [str(x.id) for x in posted.left_out] == [str(x.id) for x in out.left_out]
    with pytest.raises(InvalidRequest, match="rerank"):  # the operator offers no back-end here
        await typed.search(QUERY, user_id="carl", rerank=True)
