"""Pathological inputs at two sizes for every operation of an OpenAPI schema.

Each :class:`CostCase` builds the same request at size ``n`` and ``4n`` (``scale`` 1 or
4), and a tiny one (``scale`` 0) for the route's fixed cost, so the cost suite
(test_cost_amplification.py) can compare the server's work for the two sizes: linear
work gives a ratio near 4, quadratic work 16.
The inputs are those that made the service do super-linear work (issue 28): runs of
punctuation (``^[\\W_]+|[\\W_]+$`` backtracks over them), characters NFKC expands
(U+2A0C becomes four), unclosed JSON strings of ``\\"`` behind more than 64 brackets (the
body guard's string strip), deep brackets, many escapes, and repeated identical items.
Every size stays within the route's own limits (settings.limits), so the request is
served (or refused for its content, not its size).

:func:`document_cases` is the document class: PDF uploads (a content stream shared by
every page, a form XObject drawn over and over), HTML that was quadratic (unclosed
attributes, block elements nested without end) and mem0 adds of many document URL parts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from serve_app.testing.pdfs import shared_stream_bomb, xobject_bomb
from tests.hostile_input import SAMPLE, Schema

TEXT_CHARS = 1000  # n for text fields; 4n <= MEMSERVE_MAX_CONTENT_CHARS (8000)
RAW_BYTES = 4096  # n for whole raw bodies; 4n = 16 KiB, far below the 1 MiB body limit
ITEMS = 8  # n for arrays; 4n = 32 <= every array limit (tags 32, history 50, batch 100)
QUERY_CHARS = 32  # n for query parameters; 4n = 128 = MEMSERVE_MAX_ID_CHARS
GUARD_DEPTH = 65  # one more bracket than the guard's MAX_JSON_DEPTH, so it strips strings

#: fields that name or select things (ids, enums, dates): they keep their valid sample so
#: the request reaches the code that reads the text fields
_NAMES = {"role", "model", "type", "status", "category", "key", "cursor", "entity_type"}
_NAMES |= {"scope", "user", "timestamp"}  # a choice, the chat's end-user id, a time
_SUFFIXES = ("id", "_date", "_at", "_from", "_until")


def _is_choice(schema: Schema, prop: dict) -> bool:
    """An enum, a constant or a format (a date, a uuid) in any branch."""
    resolved = schema.resolve(prop)
    parts = [schema.resolve(p) for p in resolved.get("anyOf", resolved.get("oneOf", []))]
    return any(k in p for p in [resolved, *parts] for k in ("enum", "const", "format"))


def _max_length(schema: Schema, prop: dict) -> int | None:
    resolved = schema.resolve(prop)
    parts = [schema.resolve(p) for p in resolved.get("anyOf", resolved.get("oneOf", []))]
    found = [p["maxLength"] for p in [resolved, *parts] if "maxLength" in p]
    return min(found) if found else None


def _text_field(name: str, schema: Schema, prop: dict) -> bool:
    if name in _NAMES or name.endswith(_SUFFIXES) or _is_choice(schema, prop):
        return False
    return "string" in (schema.types(prop) or set())


def _query_text(schema: Schema, param: dict) -> bool:
    """A free string query parameter (ids included: they are all a query carries)."""
    prop = param.get("schema", {})
    if param["name"] == "cursor" or schema.is_time(prop) or "enum" in schema.resolve(prop):
        return False
    return "string" in (schema.types(prop) or {"string"})


#: kind -> (text of k characters, n): a letter on each side of a run is what makes an
#: edge-trimming regex backtrack; NFKC turns each U+2A0C into four, so its n is smaller
TEXTS: dict[str, tuple[Callable[[int], str], int]] = {
    "punctuation run": (lambda k: "a" + "!" * (k - 2) + "a", 2 * TEXT_CHARS),
    "NFKC-expanding U+2A0C": (lambda k: "a" + "\u2a0c" * (k - 2) + "a", TEXT_CHARS),
    "many escapes": (lambda k: '"\\\n\t' * (k // 4), TEXT_CHARS),
    "repeated words": (lambda k: "same " * (k // 5), TEXT_CHARS),
}
TINY = 16  # scale 0: the baseline, the route's fixed cost with the same kind of input


def size(n: int, scale: int) -> int:
    """``n * scale``; scale 0 is the baseline's tiny size."""
    return n * scale if scale else TINY


@dataclass
class CostCase:
    route: str  # "METHOD /path/{template}"
    kind: str
    method: str
    build: Callable[[int], tuple[str, bytes | None]]  # scale 0, 1, 4 -> (url, body)
    content_type: str = "application/json"

    @property
    def label(self) -> str:
        return f"{self.route} [{self.kind}]"


def cases(spec: dict, path_values: dict[str, str], skip: set[str]) -> Iterator[CostCase]:
    """The cost cases of every operation that takes a JSON body or query parameters."""
    schema = Schema(spec)
    for path, item in spec["paths"].items():
        for method, op in item.items():
            route = f"{method.upper()} {path}"
            if route not in skip:
                yield from _operation(schema, route, method.upper(), path, op, path_values)


def routes(spec: dict, skip: set[str]) -> list[str]:
    """The routes :func:`cases` covers (each has at least one case)."""
    seen = {c.route for c in cases(spec, {}, skip)}
    return sorted(seen)


def _operation(
    schema: Schema, route: str, method: str, path: str, op: dict, values: dict[str, str]
) -> Iterator[CostCase]:
    params = op.get("parameters", [])
    concrete = path
    for p in params:
        if p["in"] == "path":
            concrete = concrete.replace(f"{{{p['name']}}}", values.get(p["name"], "x"))
    query = [p for p in params if p["in"] == "query"]
    strings = [p for p in query if _query_text(schema, p)]
    base_query = {"user_id": "victim"} if any(p["name"] == "user_id" for p in query) else {}

    def url(extra: dict[str, str] | None = None) -> str:
        q = urlencode(base_query | (extra or {}))
        return concrete + (f"?{q}" if q else "")

    body = schema.body(op)
    if body is not None:
        props, base = body
        texts = [n for n, prop in props.items() if _text_field(n, schema, prop)]
        limits = [m for n in texts if (m := _max_length(schema, props[n])) is not None]
        cap = min(limits, default=4 * TEXT_CHARS * 2) // 4  # 4n within every field's limit
        arrays = [n for n, prop in props.items() if "array" in (schema.types(prop) or set())]
        for kind, (make, n) in TEXTS.items():

            def build(scale: int, make=make, n=min(n, cap)) -> tuple[str, bytes | None]:
                text = make(size(n, scale))
                doc = _fill(base | {n: text for n in texts}, text)
                return url(), json.dumps(doc).encode()

            if texts or _has_text(base):
                yield CostCase(route, kind, method, build)
        for name in arrays:  # one case per array: a bad one must not hide the others

            def repeated(scale: int, name=name) -> tuple[str, bytes | None]:
                sample = SAMPLE.get(name)
                item = sample[0] if isinstance(sample, list) and sample else "same"
                items = [item] * (ITEMS * scale or 1)
                return url(), json.dumps(base | {name: items}).encode()

            yield CostCase(route, f"repeated identical items: {name}", method, repeated)
        prefix = b'{"user_id": "victim", "x": '

        def unclosed(scale: int) -> tuple[str, bytes | None]:
            pairs = size(RAW_BYTES, scale) // 2
            return url(), prefix + b"[" * GUARD_DEPTH + b'"' + b'\\"' * pairs

        def deep(scale: int) -> tuple[str, bytes | None]:
            n = size(RAW_BYTES, scale) // 2
            return url(), prefix + b"[" * n + b"]" * n + b"}"

        yield CostCase(route, 'unclosed string of \\" behind 65 brackets', method, unclosed)
        yield CostCase(route, "deep brackets", method, deep)
    if strings:
        for kind in ("punctuation run", "NFKC-expanding U+2A0C", "repeated words"):
            make = TEXTS[kind][0]

            def in_query(scale: int, make=make) -> tuple[str, bytes | None]:
                text = make(size(QUERY_CHARS, scale))
                return url({p["name"]: text for p in strings}), None

            yield CostCase(route, f"query: {kind}", method, in_query)


def _has_text(value: Any) -> bool:
    """A ``content``/``query`` string somewhere inside (batch items, chat messages)."""
    if isinstance(value, dict):
        return any(
            (k in ("content", "query") and isinstance(v, str)) or _has_text(v)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_has_text(v) for v in value)
    return False


def _fill(value: Any, text: str) -> Any:
    """``value`` with the text of its nested ``content``/``query`` strings replaced (batch
    items, chat messages), so the text reaches what every item goes through."""
    if isinstance(value, dict):
        return {
            k: text if k in ("content", "query") and isinstance(v, str) else _fill(v, text)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_fill(v, text) for v in value]
    return value


DOCUMENTS = "POST /v1/documents"
MEM0_ADD = "POST /mem0/v3/memories/add/"
BOUNDARY = "costcaseboundary7MA4YWxkTrZu0gW"


def multipart(filename: str, ctype: str, data: bytes, fields: dict[str, str]) -> bytes:
    """A multipart/form-data body (``BOUNDARY``) of ``fields`` and one file part."""
    out = b""
    for name, value in fields.items():
        out += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    out += (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"'
        f"\r\nContent-Type: {ctype}\r\n\r\n"
    ).encode()
    return out + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def _pdf_case(kind: str, make: Callable[[int], bytes]) -> CostCase:
    def build(scale: int) -> tuple[str, bytes | None]:
        body = multipart("cost.pdf", "application/pdf", make(scale), {"document_id": "cost-pdf"})
        return "/v1/documents", body

    return CostCase(DOCUMENTS, kind, "POST", build, f"multipart/form-data; boundary={BOUNDARY}")


def _html_case(kind: str, unit: str, n: int) -> CostCase:
    def build(scale: int) -> tuple[str, bytes | None]:
        text = unit * (n * scale or 1) + "<p>end</p>"
        body = {"document_id": "cost-html", "text": text, "content_type": "text/html"}
        return "/v1/documents", json.dumps(body).encode()

    return CostCase(DOCUMENTS, kind, "POST", build)


def document_cases(url: Callable[[str], str]) -> list[CostCase]:
    """The document class; ``url(path)``: the allowed document server's URL of ``path``
    (it serves ``/cost.md``). PDFs of n and 4n pages sharing one content stream of 1,000
    operators, a form XObject drawn 500 n times; HTML of n unclosed attributes
    (``'<a b="'``: html.parser's 16x), of n ``<div>`` or ``<ul><li>`` left open (an HTML5
    tree builder's n^2); mem0 adds of 2 n document URL parts (each fetched, parsed,
    embedded). Sizes keep 4n within the parse's CPU limit, so both sizes are served or
    both refused for the same reason."""

    def add(scale: int) -> tuple[str, bytes | None]:
        part = {"type": "mdx_url", "mdx_url": {"url": url("/cost.md")}}
        messages = [{"role": "user", "content": part} for _ in range(2 * scale or 1)]
        body = {"user_id": "victim", "infer": False, "messages": messages}
        return "/mem0/v3/memories/add/", json.dumps(body).encode()

    return [
        _pdf_case(
            "PDF: pages sharing one content stream",
            lambda k: shared_stream_bomb(pages=32 * k or 1, operators=1000, op=b"0 0 Td "),
        ),
        _pdf_case(
            "PDF: one form XObject drawn n times",
            lambda k: xobject_bomb(2, 500 * k or 1, operators=1),
        ),
        _html_case('HTML: unclosed attributes <a b="', '<a b="', 20_000),
        _html_case("HTML: <div> left open", "<div>", 2_000),
        _html_case("HTML: <ul><li> left open", "<ul><li>", 1_000),
        CostCase(MEM0_ADD, "mem0 add: document URL parts", "POST", add),
    ]
