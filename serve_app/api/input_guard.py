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
from collections.abc import Iterator
from typing import Any

import numpy as np
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.errors import error_response

MAX_JSON_DEPTH = 64  # objects/arrays; tool schemas and metadata stay far below
# Strings are stripped in two linear passes, never with one pattern for "a string with its
# escapes" (``"[^"\\]*(?:\\.[^"\\]*)*"``): on an unclosed string of ``\"`` pairs that one
# rescans the rest of the body from every quote, O(n^2) (a 1 MB body: ~3000 s).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes: fixed length
_STRING = re.compile(rb'"[^"]*"')  # escapes gone, each quote starts at most one failed scan
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")  # UTF-8 bytes of U+D800..U+DFFF
_NUL_ESCAPE = re.compile(rb"\\u0000")
_SURROGATE_ESCAPE = re.compile(rb"\\ud([89ab]|[c-f])[0-9a-f]{2}")  # on the lowercased body
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")  # NUL, and surrogates json.loads let through


class InputGuard:
    """Reads the (size-limited) body once, refuses it or replays it to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            await _refuse("the path and query must not contain NUL")(scope, receive, send)
            return
        if _upload(scope):  # a file's bytes are not JSON text: the route checks its fields
            await self.app(scope, receive, send)
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


# Routes that take a multipart file upload (binary: a PDF holds NUL bytes); their form
# fields are validated by the route (serve_app/api/documents.py), the file by its parser.
UPLOAD_PATHS = frozenset({"/v1/documents"})


def _upload(scope: Scope) -> bool:
    if scope.get("path") not in UPLOAD_PATHS:
        return False
    ctype = next((v for k, v in scope.get("headers") or () if k == b"content-type"), b"")
    return ctype.lower().startswith(b"multipart/form-data")


def body_problem(body: bytes) -> str | None:
    """Why ``body`` must be refused, or None. Not a JSON validator: a body that does
    not parse is left to the route (400), only what would parse and then fail is caught.
    Byte scans in C (~20 ms for a 600 KB batch full of escaped emoji, a few us for a
    search): the body is parsed only to name a refused field."""
    opens = body.count(b"[") + body.count(b"{")  # a bound: strings may hold brackets too
    if opens > MAX_JSON_DEPTH and _nesting(_without_strings(body)) > MAX_JSON_DEPTH:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    if not _bad_text(body):
        return None
    where = _where(_documents(body))
    return f"{where[:200] or 'body'}: text must not contain NUL or unpaired surrogate characters"


def _without_strings(body: bytes) -> bytes:
    """``body`` without its string literals, in linear time. Escapes go first (left to
    right, as a JSON reader pairs them), so every quote left delimits a string; outside
    strings a backslash is not JSON, and such a body fails the route's parser anyway.
    ``"[^"]*"`` then scans from a quote to the next one: a match is consumed, and a failed
    scan means no quote is left after it, so every byte is looked at a bounded number of
    times."""
    return _STRING.sub(b"", _ESCAPE.sub(b"", body) if b"\\" in body else body)


def _nesting(text: bytes) -> int:
    """How deep the brackets of ``text`` (JSON without its strings) nest."""
    brackets = np.frombuffer(text.translate(None, _NOT_BRACKETS), dtype=np.uint8)
    if brackets.size == 0:
        return 0
    opens = (brackets == ord("[")) | (brackets == ord("{"))
    return int(np.cumsum(np.where(opens, 1, -1)).max())


def _bad_text(body: bytes) -> bool:
    """Whether a string of ``body`` would hold NUL or an unpaired surrogate once parsed
    (raw NUL bytes too: JSON refuses them, other readers might not)."""
    if b"\x00" in body or _RAW_SURROGATE.search(body):
        return True
    if b"\\u" not in body:
        return False
    if any(True for _ in _escapes(body, _NUL_ESCAPE)):
        return True
    high_end = None  # where the last high surrogate escape ended, while it waits for its low
    for m in _escapes(body.lower(), _SURROGATE_ESCAPE):  # lowercase: a 3-byte literal prefix
        if m.group(1) in b"89ab":
            if high_end is not None:
                return True  # a high after a high
            high_end = m.end()
        elif high_end != m.start():
            return True  # a low not right after its high
        else:
            high_end = None
    return high_end is not None


def _escapes(body: bytes, pattern: re.Pattern[bytes]) -> Iterator[re.Match[bytes]]:
    """Matches of ``pattern`` (which starts with a backslash) that are real escapes: not
    the second half of an escaped backslash (an even run of backslashes before them)."""
    for m in pattern.finditer(body):
        start = m.start()
        while start > 0 and body[start - 1] == 0x5C:  # "\\"
            start -= 1
        if (m.start() - start) % 2 == 0:
            yield m


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


def _where(docs: list[Any]) -> str:
    """The dotted path of the first string (key or value) holding bad text ("": none)."""
    stack: list[tuple[Any, str]] = [(doc, "") for doc in docs]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _BAD_TEXT.search(value):
                return path
        elif isinstance(value, dict):
            for key, item in value.items():
                child = f"{path}.{key}" if path else str(key)
                if _BAD_TEXT.search(key):  # named with the bad characters escaped
                    return _BAD_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", child)
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((item, f"{path}.{i}" if path else str(i)) for i, item in enumerate(value))
    return ""


def _refuse(message: str):
    return error_response(422, "invalid_request", message)
