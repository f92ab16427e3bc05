"""Text no layer below can take is refused at the door, once for every route.

PostgreSQL text refuses NUL; UTF-8 has no encoding for an unpaired surrogate (JSON's
``"\\ud800"``, or raw surrogate bytes, which ``json.loads`` lets through); a JSON
document nested thousands deep makes the parser, the validator or the encoder hit
Python's recursion limit. Each surfaced deep inside some route as a 500 (or a 503
"retry later" from a backend tier). This raw ASGI layer, behind the stranger gate
and the body limit, refuses them with a 422 before routing: NUL in the path or query
string, and in a body (JSON or JSON Lines) nesting deeper than ``MAX_JSON_DEPTH``
or any string, key or value, holding NUL or an unpaired surrogate.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.errors import error_response

MAX_JSON_DEPTH = 64  # objects/arrays; tool schemas and metadata stay far below
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string literal, escapes and all
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")  # NUL, and surrogates json.loads let through


class InputGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            await _refuse("the path and query must not contain NUL")(scope, receive, send)
            return
        messages: list[Message] = []
        while True:  # bounded: the body limit in front of this layer counts every byte
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        if messages[-1]["type"] != "http.request":
            return  # the client left (or the body limit answered 413 and cut it off)
        body = b"".join(m.get("body", b"") for m in messages)
        problem = body_problem(body) if body else None
        if problem is not None:
            await _refuse(problem)(scope, receive, send)
            return
        replay = iter([{"type": "http.request", "body": body, "more_body": False}])

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)


def body_problem(body: bytes) -> str | None:
    """Why ``body`` must be refused, or None. Not a JSON validator: a body that does
    not parse is left to the route (400), only what would parse and then fail is caught."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if len(brackets) > MAX_JSON_DEPTH and _depth(brackets) > MAX_JSON_DEPTH:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    if b"\\u" not in body and b"\xed" not in body:
        return None  # no escape and no raw surrogate bytes: nothing below can hold one
    where = _bad_text(_documents(body))
    if where is None:
        return None
    return f"{where[:200] or 'body'}: text must not contain NUL or unpaired surrogate characters"


def _depth(brackets: bytes) -> int:
    depth = deepest = 0
    for b in brackets:
        if b in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _documents(body: bytes) -> list[Any]:
    """The body as JSON, or its lines as JSON Lines; what does not parse is skipped."""
    try:
        return [json.loads(body)]
    except ValueError:
        pass
    docs = []
    for line in body.splitlines():
        try:
            docs.append(json.loads(line))
        except ValueError:
            continue
    return docs


def _bad_text(docs: list[Any]) -> str | None:
    """The dotted path of the first string (key or value) holding bad text, or None."""
    stack: list[tuple[Any, str]] = [(doc, "") for doc in docs]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _BAD_TEXT.search(value):
                return path
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if _BAD_TEXT.search(key):
                    return child.encode("utf-8", "backslashreplace").decode()
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((item, f"{path}.{i}" if path else str(i)) for i, item in enumerate(value))
    return None


def _refuse(message: str):
    return error_response(422, "invalid_request", message)
