"""Pathological inputs at two sizes for every operation of an OpenAPI schema.

Each :class:`CostCase` builds the same request at size ``n`` and ``4n`` (``scale`` 1 or
4), so the cost suite (test_cost_amplification.py) can compare the server's time for
the two: linear work gives a ratio near 4 (less, with fixed costs), quadratic work 16.
The inputs are those that made the service do super-linear work (issue 28): runs of
punctuation (``^[\\W_]+|[\\W_]+$`` backtracks over them), characters NFKC expands
(U+2A0C becomes four), unclosed JSON strings of ``\\"`` behind more than 64 brackets (the
body guard's string strip), deep brackets, many escapes, and repeated identical items.
Every size stays within the route's own limits (settings.limits), so the request is
served (or refused for its content, not its size).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from tests.hostile_input import SAMPLE, Schema

TEXT_CHARS = 1000  # n for text fields; 4n = 4000 < MEMSERVE_MAX_CONTENT_CHARS (8000)
RAW_BYTES = 4096  # n for whole raw bodies; 4n = 16 KiB, far below the 1 MiB body limit
ITEMS = 8  # n for arrays; 4n = 32 <= every array limit (tags 32, history 50, batch 100)
QUERY_CHARS = 32  # n for query parameters; 4n = 128 = MEMSERVE_MAX_ID_CHARS
GUARD_DEPTH = 65  # one more bracket than the guard's MAX_JSON_DEPTH, so it strips strings

#: fields that name or select things (ids, enums, dates): they keep their valid sample so
#: the request reaches the code that reads the text fields
_NAMES = {"role", "model", "type", "status", "category", "key", "cursor", "entity_type"}


def _text_field(name: str, schema: Schema, prop: dict) -> bool:
    if name == "id" or name.endswith("_id") or name in _NAMES or schema.is_time(prop):
        return False
    resolved = schema.resolve(prop)
    return "enum" not in resolved and "string" in (schema.types(prop) or set())


def _query_text(schema: Schema, param: dict) -> bool:
    """A free string query parameter (ids included: they are all a query carries)."""
    prop = param.get("schema", {})
    if param["name"] == "cursor" or schema.is_time(prop) or "enum" in schema.resolve(prop):
        return False
    return "string" in (schema.types(prop) or {"string"})


TEXTS: dict[str, Callable[[int], str]] = {
    "punctuation run": lambda k: "a" + "!" * (k - 2) + "a",
    "NFKC-expanding U+2A0C": lambda k: "\u2a0c" * k,
    "many escapes": lambda k: '"\\\n\t' * (k // 4),
    "repeated words": lambda k: "same " * (k // 5),
}


@dataclass
class CostCase:
    route: str  # "METHOD /path/{template}"
    kind: str
    method: str
    build: Callable[[int], tuple[str, bytes | None]]  # scale -> (url, body)

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
        arrays = [n for n, prop in props.items() if "array" in (schema.types(prop) or set())]
        for kind, make in TEXTS.items():

            def build(scale: int, make=make) -> tuple[str, bytes | None]:
                text = make(TEXT_CHARS * scale)
                doc = _fill(base | {n: text for n in texts}, text)
                return url(), json.dumps(doc).encode()

            if texts or _has_text(base):
                yield CostCase(route, kind, method, build)
        for name in arrays:  # one case per array: a bad one must not hide the others

            def repeated(scale: int, name=name) -> tuple[str, bytes | None]:
                sample = SAMPLE.get(name)
                item = sample[0] if isinstance(sample, list) and sample else "same"
                return url(), json.dumps(base | {name: [item] * (ITEMS * scale)}).encode()

            yield CostCase(route, f"repeated identical items: {name}", method, repeated)
        prefix = b'{"user_id": "victim", "x": '

        def unclosed(scale: int) -> tuple[str, bytes | None]:
            pairs = RAW_BYTES * scale // 2
            return url(), prefix + b"[" * GUARD_DEPTH + b'"' + b'\\"' * pairs

        def deep(scale: int) -> tuple[str, bytes | None]:
            n = RAW_BYTES * scale // 2
            return url(), prefix + b"[" * n + b"]" * n + b"}"

        yield CostCase(route, 'unclosed string of \\" behind 65 brackets', method, unclosed)
        yield CostCase(route, "deep brackets", method, deep)
    if strings:
        for kind in ("punctuation run", "NFKC-expanding U+2A0C", "repeated words"):
            make = TEXTS[kind]

            def in_query(scale: int, make=make) -> tuple[str, bytes | None]:
                text = make(QUERY_CHARS * scale)
                return url({p["name"]: text for p in strings}), None

            yield CostCase(route, f"query: {kind}", method, in_query)


def _has_text(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_text(v) for k, v in value.items() if k in ("content", "query"))
    if isinstance(value, list):
        return any(_has_text(v) for v in value)
    return isinstance(value, str)


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
