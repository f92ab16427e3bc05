"""LLM spend through the API in-process (no Ray): the chat proxy's 429 over a budget set
in the tenant settings, ``GET /v1/admin/usage`` (admin keys, own tenant, grouped, paged,
top users), the Python client, the CLI and the metrics. Real Postgres, encoder and
retriever; the scripted LLM is the chat upstream and counts what it served."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

import httpx
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.cli import usage as usage_cli
from serve_app.client import AsyncMemserveClient
from serve_app.metrics import SpendMetrics
from serve_app.settings import Settings
from serve_app.store.llm_spend import CallTag, Limits, Spent
from serve_app.testing.inprocess import bearer_clients, in_process_app, in_process_services

SERVICE = "msk_llm_usage_service_key_0123456789"
ADMIN = "msk_llm_usage_admin_key_0123456789ab"


@pytest.fixture
async def api(fresh_db, encoder, llm):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE, admin_key=ADMIN).with_(
        llm={"base_url": llm.url, "model": "fake"}, chat={"max_tokens": 64}
    )
    boot = bootstrap(settings, fresh_db)
    async with in_process_services(settings, boot.model, fresh_db, encoder) as services:
        assert await services.tenants.store.create("acme")
        keys = {"admin": ADMIN, "service": SERVICE}
        keys["acme_admin"], _ = await services.keys.create("acme", "admin")
        keys["acme_service"], _ = await services.keys.create("acme", "service")
        async with in_process_app(settings, services) as app:
            typed = AsyncMemserveClient(
                "http://t", keys["acme_admin"], transport=httpx.ASGITransport(app=app)
            )
            async with bearer_clients(app, keys) as clients:
                try:
                    yield clients, typed, services
                finally:
                    await typed.aclose()


async def chat(c: httpx.AsyncClient, user: str) -> httpx.Response:
    body = {"user": user, "messages": [{"role": "user", "content": f"hello from {user}"}]}
    return await c.post("/v1/chat/completions", json=body)


async def settled(services) -> None:
    """The chat calls' use is written in the background: wait for those writes."""
    pending = list(services.spend._background)
    if pending:
        await asyncio.wait(pending, timeout=10)


async def test_chat_over_budget_is_429_with_retry_after(api, llm):
    clients, _, services = api
    acme = clients["acme_service"]
    r = await clients["acme_admin"].patch(
        "/v1/admin/tenant/settings", json={"budgets": {"chat": {"user_daily": 1}}}
    )
    assert r.status_code == 200, r.text
    assert (await chat(acme, "ann")).status_code == 200  # admitted under the budget
    await settled(services)
    refused = await chat(acme, "ann")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert "user_daily" in refused.json()["error"]["message"]
    assert 0 < int(refused.headers["Retry-After"]) <= 86400
    assert len(llm.calls("chat")) == 1  # the refused call never reached the upstream
    assert (await chat(acme, "bob")).status_code == 200  # another end user's budget
    assert (await chat(clients["service"], "ann")).status_code == 200  # another tenant
    # Raising the budget lets the user in at once.
    r = await clients["acme_admin"].patch(
        "/v1/admin/tenant/settings", json={"budgets": {"chat": {"user_daily": 10**6}}}
    )
    assert r.status_code == 200
    assert (await chat(acme, "ann")).status_code == 200
    bad = await clients["acme_admin"].patch(
        "/v1/admin/tenant/settings", json={"budgets": {"chat": {"user_daily": -1}}}
    )
    assert bad.status_code == 422


async def test_admin_usage_groups_pages_and_isolates(api, llm):
    clients, typed, services = api
    for user in ("ann", "ann", "ann", "bob", "cy"):
        assert (await chat(clients["acme_service"], user)).status_code == 200
    assert (await chat(clients["service"], "zed")).status_code == 200
    await settled(services)
    served = llm.served("chat")
    assert served["calls"] == 6

    r = await clients["acme_admin"].get("/v1/admin/usage", params={"group_by": "purpose,model"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tenant_id"] == "acme" and body["group_by"] == ["purpose", "model"]
    [row] = body["rows"]
    assert row["purpose"] == "chat" and row["model"] == "fake" and row["calls"] == 5
    assert [u["user_id"] for u in body["top_users"]][0] == "ann"
    # The other tenant's use is its own: both together are what the LLM served.
    other = (await clients["admin"].get("/v1/admin/usage", params={"group_by": "user"})).json()
    assert [r["user_id"] for r in other["rows"]] == ["zed"]
    total = row["prompt_tokens"] + other["rows"][0]["prompt_tokens"]
    assert total == served["prompt_tokens"]

    # Paged by end user; the pages together are every user once.
    seen, offset = [], 0
    while offset is not None:
        page = await typed.llm_usage(group_by=["user"], limit=1, offset=offset, top_users=0)
        seen += [r.user_id for r in page.rows]
        offset = page.next_offset
    assert seen == ["ann", "bob", "cy"]
    one = await typed.llm_usage(group_by="day,user", user_id="bob")
    assert [(r.user_id, r.calls) for r in one.rows] == [("bob", 1)]
    whole = await typed.llm_usage(group_by=[], since="2020-01-01", until="2020-12-31")
    assert [(r.calls, r.prompt_tokens, r.latency_ms) for r in whole.rows] == [(0, 0, 0.0)]

    # The CLI prints the same (through the same client).
    args = argparse.Namespace(
        group_by="user", since=None, until=None, user=None, top=2, limit=100, all=True, json=False
    )
    text = usage_cli.render(await usage_cli.fetch(typed, args), as_json=False)
    assert "ann\t3\t" in text and "top end users" in text and "zed" not in text

    # Metrics: tokens per tenant and purpose, what the meter counted.
    counts = services.spend.metrics.counts
    assert counts["prompt_chat"] == served["prompt_tokens"]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"group_by": "day,password"}, 422),
        ({"group_by": "day,day"}, 422),
        ({"since": "2026-02-01", "until": "2026-01-01"}, 422),
        ({"since": "2020-01-01", "until": "2026-01-01"}, 422),
        ({"since": "yesterday"}, 422),
        ({"top_users": 101}, 422),
        ({"user_id": "a b"}, 422),
        ({"until": "0001-01-01"}, 200),  # the default range stops at the first day
        ({"since": "9999-12-31", "until": "9999-12-31"}, 200),
    ],
)
async def test_bad_queries_are_4xx(api, params, status):
    clients, _, _ = api
    r = await clients["acme_admin"].get("/v1/admin/usage", params=params)
    assert r.status_code == status, r.text


async def test_only_admin_keys(api):
    clients, _, _ = api
    assert (await clients["acme_service"].get("/v1/admin/usage")).status_code == 403


def test_metric_tenants_are_bounded():
    m = SpendMetrics(max_tenants=2)
    for t in ("a", "b", "c", "d", "a"):
        m.call(t, "extract", "ok", {"prompt": 1})
    labels = {tags[0] for tags in m.tokens.totals}
    assert labels == {"a", "b", "other"}


async def test_session_status_says_deferred_over_a_background_budget(api):
    clients, _, services = api
    admin, acme = clients["acme_admin"], clients["acme_service"]
    r = await admin.patch(
        "/v1/admin/tenant/settings", json={"budgets": {"background": {"tenant_daily": 100}}}
    )
    assert r.status_code == 200
    turn = {"user_id": "ann", "messages": [{"role": "user", "content": "I moved to Oslo"}]}
    assert (await acme.post("/v1/sessions/s1/turns", json=turn)).status_code == 202
    status = (await acme.get("/v1/sessions/s1", params={"user_id": "ann"})).json()
    assert status["pending_turns"] == 1 and status.get("deferred") is None
    # The tenant's extraction spent its day (as an Extractor replica records it).
    tag = CallTag("acme", "bob", "extract")
    store, day = services.spend.store, services.spend.today()
    call_id, _ = await store.begin(tag, "fake", day, 80, 100, Limits())
    await store.finish(call_id, Spent("ok", 80, 40))
    status = (await acme.get("/v1/sessions/s1", params={"user_id": "ann"})).json()
    assert status["deferred"] == "budget" and status["pending_turns"] == 1
    assert status["resumes_at"].startswith((day + timedelta(days=1)).isoformat())
    assert (await clients["acme_service"].get("/readyz")).status_code == 200
