"""What the chat proxy meters is what the upstream billed: usage asked for on every
stream (and kept from a client that did not ask for it), cached prompt tokens recorded,
and, when an upstream reports nothing, an estimate from every part of the request (tools,
tool calls, images) that the budget refuses on. In process: real Postgres, the app and
the scripted upstream (serve_app/testing/llm_server.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.spend.estimate import IMAGE_TOKENS, request_tokens
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services
from serve_app.testing.llm_server import FakeLLM

KEY = "msk_chat_metering_key_0123456789abcd"
ADMIN = "msk_chat_metering_admin_0123456789ab"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Looks something up in a large catalogue of things " * 8,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    for i in range(12)
]
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


@pytest.fixture
def llm():
    fake = FakeLLM().start()
    yield fake
    fake.stop()


@pytest.fixture
async def api(fresh_db, encoder, llm):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN).with_(
        llm={"base_url": llm.url, "model": "fake"}, chat={"max_tokens": 64}
    )
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        c = bearer_client(app, KEY)
        try:
            yield c, services, fresh_db
        finally:
            await c.aclose()


async def settled(services) -> None:
    pending = list(services.spend._background)
    if pending:
        await asyncio.wait(pending, timeout=10)


def metered(dsn: str) -> list[tuple[int, int, int, bool]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT prompt_tokens, completion_tokens, cached_tokens, estimated FROM llm_calls"
            " WHERE purpose = 'chat' ORDER BY id"
        ).fetchall()


def events(text: str) -> list[dict]:
    lines = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
    return [json.loads(x) for x in lines if x != "[DONE]"]


async def stream(c: httpx.AsyncClient, **extra) -> str:
    body = {"user": "ann", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    r = await c.post("/v1/chat/completions", json={**body, **extra})
    assert r.status_code == 200, r.text
    return r.text


async def test_every_stream_asks_for_usage_and_the_client_sees_what_it_asked(api, llm):
    c, services, dsn = api
    plain = events(await stream(c))
    assert llm.calls("chat")[-1]["body"]["stream_options"] == {"include_usage": True}
    assert all("usage" not in e for e in plain)  # not asked: no usage chunk, no usage key
    assert all(e["choices"] for e in plain)
    asked = events(await stream(c, stream_options={"include_usage": True}))
    assert asked[-1]["choices"] == [] and asked[-1]["usage"]["prompt_tokens"] > 0
    await settled(services)
    served = [r["usage"] for r in llm.calls("chat")]
    rows = metered(dsn)
    assert [(p, co, ca) for p, co, ca, _ in rows] == [
        (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"])
        for u in served
    ]
    assert not any(est for *_, est in rows)  # reported, not estimated


async def test_cached_prompt_tokens_are_metered(api, llm):
    c, services, dsn = api
    long = "Tell me about the history of the city of Lisbon, in detail. " * 40
    body = {"user": "ann", "messages": [{"role": "user", "content": long}]}
    for _ in range(2):
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
    await settled(services)
    cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in llm.calls("chat")]
    assert cached[1] > 0  # the scripted upstream's prefix cache served the second
    assert [ca for _, _, ca, _ in metered(dsn)] == cached


async def test_without_reported_usage_every_part_of_the_request_is_counted(api, llm):
    c, services, dsn = api
    llm.set_usage(False)  # an upstream that ignores include_usage
    content = [{"type": "text", "text": "what is in this picture?"}, IMAGE]
    text = await stream(c, tools=TOOLS, messages=[{"role": "user", "content": content}])
    assert "chat.completion.chunk" in text
    await settled(services)
    [(prompt, completion, _, estimated)] = metered(dsn)
    assert estimated and completion > 0
    tools_alone = request_tokens({"tools": TOOLS})
    assert tools_alone > 1000 and prompt >= tools_alone + IMAGE_TOKENS
    assert prompt == llm.calls("chat")[0]["usage"]["prompt_tokens"]  # what it billed


async def test_a_daily_budget_refuses_once_the_tools_used_it_up(api, llm):
    """The budget admits a call while the day's use is under it: the first call with a
    large tool list goes through, its tokens (tools counted) use the budget up, and the
    next is refused before the upstream (was: metered from the message text only, so a
    1,000-token budget never refused)."""
    c, services, dsn = api
    llm.set_usage(False)
    r = await c.patch(
        "/v1/admin/tenant/settings",
        json={"budgets": {"chat": {"user_daily": 1000}}},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    body = {"user": "ann", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    assert (await c.post("/v1/chat/completions", json={**body, "stream": True})).status_code == 200
    await settled(services)
    [(prompt, *_)] = metered(dsn)
    assert prompt > 1000
    refused = await c.post("/v1/chat/completions", json={**body, "stream": True})
    assert refused.status_code == 429, refused.text
    assert len(llm.calls("chat")) == 1  # the refused call never reached the upstream
