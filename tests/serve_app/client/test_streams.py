"""Streamed answers: records as they arrive, and a stream cut short raises (it never
looks like a complete export or chat answer). Answers come from httpx.MockTransport."""

from __future__ import annotations

import json

import httpx
import pytest

from serve_app.client import AsyncMemserveClient, MemserveClient, NotFound, Unavailable

HEADER = {"kind": "header", "format": "memserve-export"}
MEMORY = {"kind": "memory", "id": "m1", "content": "I like tea"}
END = {"kind": "end", "memories": 1, "facts": 0, "history": 0}


def lines(*records: dict) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def transport(status: int, body: bytes, seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body)

    return httpx.MockTransport(answer)


def sync(status: int, body: bytes, seen: list[httpx.Request]) -> MemserveClient:
    return MemserveClient("http://t", "k", transport=transport(status, body, seen))


def aclient(status: int, body: bytes, seen: list[httpx.Request]) -> AsyncMemserveClient:
    return AsyncMemserveClient("http://t", "k", transport=transport(status, body, seen))


async def test_export_yields_records_and_refuses_a_cut_stream():
    seen: list[httpx.Request] = []
    with sync(200, lines(HEADER, MEMORY, END), seen) as m:
        stream = m.export(user_id="u1")
        assert seen == []  # lazily: sent when iterated
        assert list(stream) == [HEADER, MEMORY, END]
    assert seen[0].url.path == "/v1/export" and seen[0].url.params["user_id"] == "u1"
    async with aclient(200, lines(HEADER, MEMORY, END), seen) as am:
        assert [r async for r in am.export()] == [HEADER, MEMORY, END]
    with sync(200, lines(HEADER, MEMORY), seen) as m, pytest.raises(Unavailable, match="end"):
        list(m.export())
    async with aclient(200, lines(HEADER), seen) as am:
        with pytest.raises(Unavailable):
            [r async for r in am.export()]


async def test_stream_errors_are_the_typed_errors():
    error = json.dumps({"error": {"code": "not_found", "message": "no user"}}).encode()
    with sync(404, error, []) as m, pytest.raises(NotFound, match="no user"):
        list(m.export())
    async with aclient(404, error, []) as am:
        with pytest.raises(NotFound):
            [r async for r in am.chat_stream([("user", "hi")])]


def sse(*events: str) -> bytes:
    return "".join(f"data: {e}\n\n" for e in events).encode()


async def test_chat_stream_reads_events_until_done():
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "hi"}}]}
    seen: list[httpx.Request] = []
    with sync(200, sse(json.dumps(chunk), json.dumps(chunk), "[DONE]"), seen) as m:
        assert list(m.chat_stream([("user", "yo")], session_id="s9")) == [chunk, chunk]
    body = json.loads(seen[0].content)
    assert body["stream"] is True and seen[0].headers["x-memserve-session"] == "s9"
    async with aclient(200, sse(json.dumps(chunk)), seen) as am:  # no [DONE]: cut
        with pytest.raises(Unavailable, match="DONE"):
            [c async for c in am.chat_stream([("user", "yo")])]
    failed = json.dumps({"error": {"code": "upstream_error", "message": "LLM failed"}})
    with sync(200, sse(json.dumps(chunk), failed), seen) as m, pytest.raises(Unavailable) as e:
        list(m.chat_stream([("user", "yo")]))
    assert e.value.status == 502 and e.value.code == "upstream_error"
