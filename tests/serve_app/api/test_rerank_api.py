"""``rerank`` through the API in-process (no Ray; real Postgres, encoder and retriever):
on /v1/search, /v1/context (POST and GET) and mem0's search, with the tiny ONNX
cross-encoder built at test time and the scripted LLM (metered under purpose
``rerank``, the order kept and said so when over budget); 422 on /v1 and mem0's no-op
when the tenant is offered no back-end."""

from __future__ import annotations

import json
import re

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.retrieval.rerank import RERANK_MARKER, CrossEncoder
from serve_app.settings import Settings
from serve_app.testing.cross_encoder import build_cross_encoder
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services

SERVICE = "msk_rerank_api_service_key_0123456789"
ADMIN = "msk_rerank_api_admin_key_0123456789ab"
QUERY = "How do I charge my car on a long road trip?"
MEMORIES = [
    "I drive a Tesla Model 3",
    "My car needs a wash after every road trip",
    "I have two cats who keep fighting",
    "I am learning Python to practice coding",
    "The user likes coffee on long trips",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_cross_encoder(tmp_path_factory.mktemp("xenc"))


@pytest.fixture
async def api(fresh_db, encoder, llm, model_dir):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE, admin_key=ADMIN).with_(
        llm={"base_url": llm.url, "model": "fake"},
        rerank={"backends": ["onnx", "llm"], "onnx_dir": model_dir},
    )
    boot = bootstrap(settings, fresh_db)
    services_cm = in_process_services(settings, boot.model, fresh_db, encoder)
    async with services_cm as services, in_process_app(settings, services) as app:
        svc, admin = bearer_client(app, SERVICE), bearer_client(app, ADMIN)
        try:
            for text in MEMORIES:
                r = await svc.post("/v1/memories", json={"user_id": "bob", "content": text})
                assert r.status_code == 201, r.text
            yield svc, admin, services
        finally:
            await svc.aclose()
            await admin.aclose()


async def search(svc, **extra) -> dict:
    body = {"user_id": "bob", "query": QUERY, "knowledge": False, **extra}
    r = await svc.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def by_model(model_dir, contents: list[str]) -> list[str]:
    scores = CrossEncoder(model_dir).score_sync(QUERY, contents)
    return [c for _, c in sorted(zip(scores, contents, strict=True), key=lambda p: -p[0])]


async def test_search_rerank_onnx_reorders_the_candidate_pool(api, model_dir):
    svc, *_ = api
    plain = await search(svc, top_k=20)
    assert plain["rerank"] is None and all(r["rerank_score"] is None for r in plain["results"])
    pool = [r["content"] for r in plain["results"]]
    assert len(pool) >= 3
    got = await search(svc, top_k=2, rerank="onnx")
    # the best two of the whole pool by the model, not the search's top two reordered
    assert [r["content"] for r in got["results"]] == by_model(model_dir, pool)[:2]
    assert got["rerank"] == {
        "backend": "onnx",
        "applied": True,
        "reason": None,
        "candidates": len(pool),
    }
    scores = [r["rerank_score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)


async def test_context_rerank_post_and_get(api, model_dir):
    svc, *_ = api
    body = {"user_id": "bob", "query": QUERY, "rerank": True, "explain": True}
    r = await svc.post("/v1/context", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rerank"]["applied"] and out["rerank"]["backend"] == "onnx"  # the first offered
    assert all(m["rerank_score"] is not None and "why" in m for m in out["memories"])
    params = {"user_id": "bob", "query": QUERY, "rerank": "onnx"}
    got = await svc.get("/v1/context", params=params)
    assert got.status_code == 200, got.text
    assert got.json()["rerank"]["applied"] and got.json()["left_out"] is None
    assert [m["id"] for m in got.json()["memories"]] == [m["id"] for m in out["memories"]]


async def test_context_llm_judge_admits_by_its_score_in_place_of_the_gate(api, llm):
    """With a bar (``llm_min_score``, 5 by default) the LLM's scores decide what the
    block shows: coffee on long trips, which the evidence gate leaves out, shown because
    it scored 9; the car wash, which the gate shows, left out under ``rerank`` because it
    scored 1."""
    svc, *_ = api
    coffee, wash = (
        "The user likes coffee on long trips",
        "My car needs a wash after every road trip",
    )
    body = {"user_id": "bob", "query": QUERY, "explain": True}
    plain = (await svc.post("/v1/context", json=body)).json()
    assert wash in {m["content"] for m in plain["memories"]}
    assert {x["content"]: x["rule"] for x in plain["left_out"]}[coffee] == "gate"

    def judge(kind, messages):
        if RERANK_MARKER not in messages[0]["content"]:
            return None
        listed = re.findall(r"^\[(\d+)\] (.*)$", messages[-1]["content"], re.M)
        return json.dumps({"scores": [9 if text == coffee else 1 for _, text in listed]})

    llm.add_responder(judge)
    r = await svc.post("/v1/context", json={**body, "rerank": "llm"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rerank"]["applied"] and out["rerank"]["candidates"] >= 3
    assert [m["content"] for m in out["memories"]] == [coffee]
    assert out["memories"][0]["why"] == "re-scored 9.00 (bar 5)"
    judged = {x["content"]: x for x in out["left_out"] if x["rule"] == "rerank"}
    assert wash in judged and all(x["rerank_score"] == 1.0 for x in judged.values())


async def test_mem0_search_rerank_true_uses_the_default_backend(api, model_dir):
    svc, *_ = api
    body = {"query": QUERY, "filters": {"user_id": "bob"}, "top_k": 2, "rerank": True}
    r = await svc.post("/mem0/v3/memories/search/", json=body)
    assert r.status_code == 200, r.text
    plain = await search(svc, top_k=20)
    want = by_model(model_dir, [x["content"] for x in plain["results"]])[:2]
    assert [x["memory"] for x in r.json()["results"]] == want
    assert r.json()["rerank"]["applied"] and r.json()["rerank"]["backend"] == "onnx"


async def test_rerank_not_offered_is_422_on_v1_and_a_no_op_on_mem0(api):
    svc, admin, *_ = api
    r = await admin.patch("/v1/admin/tenant/settings", json={"rerank": {"backends": []}})
    assert r.status_code == 200, r.text
    for path, body in (
        ("/v1/search", {"user_id": "bob", "query": QUERY, "rerank": True}),
        ("/v1/context", {"user_id": "bob", "query": QUERY, "rerank": "onnx"}),
    ):
        refused = await svc.post(path, json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "rerank_unavailable"
    got = await svc.get("/v1/context", params={"user_id": "bob", "query": QUERY, "rerank": "llm"})
    assert got.status_code == 422, got.text
    body = {"query": QUERY, "filters": {"user_id": "bob"}, "rerank": True}
    r = await svc.post("/mem0/v3/memories/search/", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["rerank"] == {
        "backend": None,
        "applied": False,
        "reason": "not_configured",
        "candidates": 0,
    }
    plain = await svc.post("/mem0/v3/memories/search/", json={**body, "rerank": False})
    assert [x["id"] for x in r.json()["results"]] == [x["id"] for x in plain.json()["results"]]
    # a tenant may narrow the operator's list, never widen it with an unknown back-end
    bad = await admin.patch("/v1/admin/tenant/settings", json={"rerank": {"backends": ["bm25"]}})
    assert bad.status_code == 422
    unknown = {"query": QUERY, "user_id": "bob", "rerank": "bm25"}
    assert (await svc.post("/v1/search", json=unknown)).status_code == 422


async def test_llm_rerank_is_metered_and_falls_back_over_budget(api, llm):
    svc, admin, services = api
    plain = await search(svc, top_k=20)
    n = len(plain["results"])
    # the LLM ranks the search's last candidate first
    scores = [0] * (n - 1) + [9]
    llm.add_rule(RERANK_MARKER, json.dumps({"scores": scores}), kind=None)
    got = await search(svc, top_k=n, rerank="llm")
    assert got["rerank"]["applied"] and got["rerank"]["backend"] == "llm"
    assert got["results"][0]["id"] == plain["results"][-1]["id"]
    assert len(llm.calls()) == 1
    # asked in the strict format, for exactly one whole-number score per candidate
    fmt = llm.calls()[0]["body"]["response_format"]
    scores = fmt["json_schema"]["schema"]["properties"]["scores"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert scores["minItems"] == scores["maxItems"] == n and scores["items"] == {"type": "integer"}
    # the scores belong to that response: the next plain search (a hot cache) has none
    again = await search(svc, top_k=n)
    assert [r["rerank_score"] for r in again["results"]] == [None] * n
    async with services.spend.store.pool.connection() as conn:
        cur = await conn.execute("SELECT purpose, grp, user_id, outcome FROM llm_calls")
        rows = await cur.fetchall()
    assert rows == [{"purpose": "rerank", "grp": "chat", "user_id": "bob", "outcome": "ok"}]
    # over the tenant's chat budget: no call is sent, the search order stands, said so
    r = await admin.patch(
        "/v1/admin/tenant/settings", json={"budgets": {"chat": {"tenant_daily": 1}}}
    )
    assert r.status_code == 200, r.text
    fallback = await search(svc, top_k=n, rerank="llm")
    assert fallback["rerank"] == {
        "backend": "llm",
        "applied": False,
        "reason": "over_budget",
        "candidates": n,
    }
    assert [x["id"] for x in fallback["results"]] == [x["id"] for x in plain["results"]]
    assert len(llm.calls()) == 1
    ctx = await svc.post("/v1/context", json={"user_id": "bob", "query": QUERY, "rerank": "llm"})
    assert ctx.status_code == 200, ctx.text
    assert ctx.json()["rerank"]["reason"] == "over_budget"
