"""The input guard: what it refuses (NUL, unpaired surrogates, deep nesting) and what it
must let through untouched (emoji pairs, escaped backslashes, brackets inside strings,
Hangul), and that the app behind it still reads the whole body, however it was sent."""

from __future__ import annotations

import json

import pytest

from serve_app.api.input_guard import MAX_JSON_DEPTH, InputGuard, body_problem


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": "\\ud83d\\ude00"}',  # an emoji as a client with ensure_ascii sends it
        b'{"a": "\\uD83D\\uDE00"}',
        b'{"a": "\\\\u0000"}',  # an escaped backslash, then the text u0000
        b'{"a": "\\\\ud800"}',
        '{"a": "한국어 😀 café"}'.encode(),  # Hangul starts with the byte 0xED too
        json.dumps({"a": "[" * 500, "b": "{" * 500}).encode(),  # brackets in strings
        b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH,
        b'{"user_id": "u", "content": ',  # not JSON: the route's parser says so (400)
        b"",
    ],
)
def test_what_passes(body):
    assert body_problem(body) is None


@pytest.mark.parametrize(
    "body,where",
    [
        (b'{"a": "x\\u0000"}', "a"),
        (b'{"a": {"b": ["ok", "\\ud800"]}}', "a.b.1"),  # an unpaired high surrogate
        (b'{"a": "x\\udc00"}', "a"),  # an unpaired low one
        (b'{"a": "\\ud83d\\ud83d\\ude00"}', "a"),  # a high before a pair
        (b'{"a": "\\\\\\u0000"}', "a"),  # an escaped backslash, then a real escape
        (b'{"a": "\\\\ud800\\udc00"}', "a"),  # text "\\ud800", then a lone low one
        (b'{"a": "\xed\xa0\x80"}', "a"),  # raw surrogate bytes (json.loads lets them in)
        (b'{"k\\u0000": 1}', "k\\u0000"),
        (b'{"a": 1}\n{"b": "\\u0000"}\n', "b"),  # JSON Lines (import)
    ],
)
def test_what_is_refused_and_where(body, where):
    problem = body_problem(body)
    assert problem is not None and problem.startswith(f"{where}: ") and "NUL" in problem


@pytest.mark.parametrize(
    "body",
    [
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
        b"[" * 100_000,  # never closed: the parser would hit the recursion limit first
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        b'{"x": "]]]]]]", "deep": ' + b"[" * 64 + b"]" * 64 + b"}",  # strings' brackets
        b'{"x": "\\"]]]\\\\", "deep": ' + b"[" * 64 + b"]" * 64 + b"}",  # escaped quotes
        b'["\\\\"' + b"[" * 65,  # an escaped backslash ends no string: the brackets count
    ],
)
def test_deep_nesting_is_refused(body):
    assert body_problem(body) == f"JSON nested deeper than {MAX_JSON_DEPTH} levels"


def test_escaped_quotes_and_backslashes_keep_strings_apart():
    """An escaped quote does not end a string; an escaped backslash before a quote does."""
    inside = b'{"a": "\\" [[[[ \\\\", "b": "' + b"[" * 70 + b'"}'
    assert body_problem(inside) is None


@pytest.mark.timeout(10)  # the old strip took ~3000 s on this body: a hang, not a timing
def test_an_unclosed_string_of_escaped_quotes_costs_linear_work():
    """More brackets than the depth limit, then a string of 500,000 ``\\"`` pairs that
    never closes: one pattern for "a string with its escapes" rescanned the rest of the
    body from every quote (16 KB: 0.7 s, 1 MB: ~3000 s). Not JSON: the route says 400."""
    tail = b'"' + b'\\"' * 500_000
    assert body_problem(b'{"a": "' + b"[" * 65 + b'", "b": ' + tail) is None
    assert body_problem(b"[" * 65 + tail) == f"JSON nested deeper than {MAX_JSON_DEPTH} levels"


async def call(chunks: list[bytes], path: str = "/v1/x", query: bytes = b"") -> tuple[int, bytes]:
    seen: list[bytes] = []

    async def app(scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "query_string": query, "headers": []}
    await InputGuard(app)(scope, receive, send)
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], out


async def test_the_app_reads_the_whole_body_as_sent_in_chunks():
    status, body = await call([b'{"a": ', b'"b"', b"}"])
    assert status == 200 and body == b'{"a": "b"}'


async def test_refusals_never_reach_the_app():
    status, body = await call([b'{"a": "', b'\\u0000"}'])  # split across chunks
    assert status == 422 and b'"invalid_request"' in body
    status, _ = await call([b"{}"], query=b"user_id=a%00b")
    assert status == 422
    status, _ = await call([b"{}"], path="/v1/sessions/a\x00b")
    assert status == 422
