"""The chat proxy when a stream ends early, and what an upstream failure tells the client.

A stream cut before ``[DONE]`` (the upstream stops, or the client goes away) still
records the turn streamed so far and counts the call with estimated tokens; an
upstream error reaches the client as its status class and a request id, never as
the upstream's own text. In-process over real Postgres, the real encoder and, for the
client that goes away, a real uvicorn server; the upstream is the scripted fake LLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import httpx
import psycopg
import pytest
import uvicorn

from serve_app.api import create_app
from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api, in_process_services
from serve_app.testing.llm_server import DEFAULT_CHAT_ANSWER
from serve_app.text import count_tokens

KEY = "msk_chat_stream_cut_test_key_0123456789"
LEAK = "Incorrect API key provided: sk-proj-ab12****wxyz for organization org-AcmeSecret"


@pytest.fixture
def settings(fresh_db, llm) -> Settings:
    return Settings(database_url=fresh_db, bootstrap_key=KEY).with_(
        llm={"base_url": llm.url, "model": "fake"},
        chat={"usage_flush_s": 3600},  # use stays pending: the report shows it at once
    )


def body(stream: bool = True) -> dict:
    return {"user": "ann", "stream": stream, "messages": [{"role": "user", "content": "hello"}]}


def first_piece() -> str:
    """The fake's first content chunk (it streams the answer in three pieces)."""
    return DEFAULT_CHAT_ANSWER[: max(1, len(DEFAULT_CHAT_ANSWER) // 3)]


async def recorded_turns(dsn: str, n: int = 2, wait_s: float = 10.0) -> list[tuple[str, str]]:
    """(role, content) of ann's chat turns once ``n`` are there (recording is in the
    background); what is there after ``wait_s`` otherwise."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT role, content FROM session_turns WHERE user_id = 'ann'"
                " AND session_id = 'chat' ORDER BY turn_index"
            ).fetchall()
        if len(rows) >= n or asyncio.get_running_loop().time() > deadline:
            return rows
        await asyncio.sleep(0.1)


async def usage_rows(services) -> list[dict]:
    return await services.chat.usage.report("default")


def assert_counted_once(rows: list[dict], answer: str) -> None:
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["requests"], row["refused"]) == (1, 0)
    assert row["prompt_tokens"] >= count_tokens("hello")  # estimated: nothing was reported
    assert row["completion_tokens"] == count_tokens(answer)


async def test_a_stream_the_upstream_cuts_keeps_its_turn_and_counts_its_tokens(
    fresh_db, encoder, llm, settings
):
    llm.set_mode("cut")
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        r = await c.post("/v1/chat/completions", json=body())
        assert r.status_code == 200, r.text
        assert "[DONE]" not in r.text and first_piece() in r.text
        assert await recorded_turns(fresh_db) == [("user", "hello"), ("assistant", first_piece())]
        assert_counted_once(await usage_rows(services), first_piece())


@contextlib.asynccontextmanager
async def served(app) -> AsyncIterator[str]:
    """The app behind a real uvicorn server on this loop (a client can really go away)."""
    # lifespan on: its shutdown stops what requests started (the request metrics' Flusher)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_client_that_goes_away_mid_stream_still_has_its_turn_and_use_recorded(
    fresh_db, encoder, llm, settings
):
    llm.set_mode("slow_stream", delay_s=0.5)  # ~2.5 s for the whole answer
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        served(create_app(settings, services)) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as c,
    ):
        seen = ""
        async with c.stream("POST", "/v1/chat/completions", json=body()) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    seen += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                if seen:
                    break  # the client leaves after the first piece of the answer
        assert seen == first_piece()
        turns = await recorded_turns(fresh_db)
        assert turns[0] == ("user", "hello")
        assert turns[1][0] == "assistant" and turns[1][1].startswith(first_piece())
        assert turns[1][1] != DEFAULT_CHAT_ANSWER  # recorded when the client left, not after
        assert_counted_once(await usage_rows(services), turns[1][1])


@pytest.mark.parametrize(
    ("upstream", "status", "code"), [(400, 400, "upstream_rejected"), (500, 502, "upstream_error")]
)
@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_error_reaches_the_client_without_the_upstream_text(
    fresh_db, encoder, llm, settings, caplog, upstream, status, code, stream
):
    llm.add_rule("hello", "", kind="chat", status=upstream, message=LEAK)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        with caplog.at_level(logging.WARNING, logger="serve_app.services.chat"):
            r = await c.post("/v1/chat/completions", json=body(stream))
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    for secret in ("sk-proj", "org-AcmeSecret", "Incorrect API key"):
        assert secret not in r.text
    request_id = r.headers["X-Request-Id"]
    assert f"HTTP {upstream // 100}xx; request id {request_id}" in error["message"]
    logged = [rec.getMessage() for rec in caplog.records if request_id in rec.getMessage()]
    assert len(logged) == 1 and LEAK in logged[0]  # the detail is in the operator's log
