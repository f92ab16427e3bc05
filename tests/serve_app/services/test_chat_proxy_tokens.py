"""The chat proxy in-process (no Ray): the token cap is the default limit sent upstream,
and ``GET /v1/chat/usage`` shows use the meter has not written yet.

Real Postgres, encoder and retriever behind the app; the upstream is the scripted
fake LLM (serve_app/testing/llm_server.py)."""

from __future__ import annotations

import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api
from serve_app.testing.llm_server import DEFAULT_CHAT_ANSWER, FakeLLM

KEY = "msk_chat_tokens_test_key_0123456789"
CAP = 512


@pytest.fixture
def llm():
    fake = FakeLLM().start()
    yield fake
    fake.stop()


def settings_for(dsn: str, llm: FakeLLM, **chat) -> Settings:
    return Settings(database_url=dsn, bootstrap_key=KEY).with_(
        llm={"base_url": llm.url, "model": "fake"},
        chat={"max_tokens": CAP, "usage_flush_s": 3600, **chat},  # usage stays pending
    )


async def ask(c, **extra) -> str:
    """The answer's text (streamed or not) of one call through the proxy."""
    body = {"user": "ann", "messages": [{"role": "user", "content": "hi"}], **extra}
    r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    if extra.get("stream"):
        assert r.text.rstrip().endswith("data: [DONE]"), r.text
        return r.text
    return r.json()["choices"][0]["message"]["content"]


def upstream_limits(llm: FakeLLM) -> dict:
    body = llm.calls("chat")[-1]["body"]
    return {k: body[k] for k in ("max_tokens", "max_completion_tokens") if k in body}


async def test_the_cap_is_the_default_limit_and_usage_shows_at_once(fresh_db, encoder, llm):
    settings = settings_for(fresh_db, llm)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        assert await ask(c) == DEFAULT_CHAT_ANSWER  # the upstream's answer, as is
        assert upstream_limits(llm) == {"max_tokens": CAP}
        await ask(c, max_tokens=7)
        assert upstream_limits(llm) == {"max_tokens": 7}
        await ask(c, max_completion_tokens=9)
        assert upstream_limits(llm) == {"max_completion_tokens": 9}
        assert "chat.completion.chunk" in await ask(c, stream=True)
        assert upstream_limits(llm) == {"max_tokens": CAP}
        r = await c.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "x"}],
                "user": "ann",
                "max_tokens": CAP + 1,
            },
        )
        assert r.status_code == 422

        assert services.chat.usage.flushes == 0 and services.chat.usage.pending == 1
        usage = (await c.get("/v1/chat/usage")).json()["usage"]
        assert [(u["requests"], u["refused"]) for u in usage] == [(4, 1)]
    with psycopg.connect(fresh_db) as conn:  # closing the services wrote the pending use
        rows = conn.execute("SELECT requests, refused FROM chat_usage").fetchall()
    assert rows == [(4, 1)]


async def test_the_default_can_go_in_max_completion_tokens(fresh_db, encoder, llm):
    settings = settings_for(fresh_db, llm, default_tokens_field="max_completion_tokens")
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        await ask(c)
        assert upstream_limits(llm) == {"max_completion_tokens": CAP}
        await ask(c, max_tokens=5)
        assert upstream_limits(llm) == {"max_tokens": 5}
