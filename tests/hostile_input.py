"""Hostile requests for every operation of an OpenAPI schema (a new route is covered
without touching this file): NUL and unpaired surrogates in every string (body fields,
nested values and keys, query, path), deep JSON nesting, out-of-range and non-ASCII
integers (query, body, ``If-Match``), wrong JSON types per field and for the whole body,
and mem0 filters of the wrong shape. Each case says whether only a 4xx is acceptable
(``strict``) or any answer below 500 (a huge ``token_budget`` may simply be served).

Used by the in-process test (tests/serve_app/api/test_hostile_input.py) and by the
security suite over HTTP (tests/security/test_hostile_input.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import psycopg

TEXT = {"NUL": "a\x00b", "lone surrogate": "a\ud800b", "lone low surrogate": "\udc00z"}
RAW_TEXT = {"NUL": "a%00b", "lone surrogate": "a%ED%A0%80b"}  # as a URL spells them
INTS = {"10**30": 10**30, "-10**30": -(10**30), "2**63": 2**63, "-1": -1}
INT_TEXT = {"non-ASCII digits": "١٢", "superscript": "²", "10**30": str(10**30), "-1": "-1"}
IF_MATCH = ['"١٢"', '"²"', f'"{10**30}"', '"-1"', '"0"', 'W/"x"', "1.5"]
WRONG = {  # per JSON type: values no lax coercion turns into it
    "string": [7, 0.5, True, ["x"], {"k": "x"}],
    "integer": ["x", 0.5, ["x"], {"k": "x"}],
    "number": ["x", ["x"], {"k": "x"}],
    "boolean": ["maybe", 7, ["x"], {"k": "x"}],
    "array": ["x", 7, {"k": "x"}],
    "object": ["x", 7, ["x"]],
}
FILTERS = [
    {"categories": {"in": "a"}},
    {"categories": {"in": [7]}},
    {"categories": 7},
    {"metadata": "x"},
    {"metadata": {"k": ["x"]}},
    {"created_at": {"gte": "not a date"}},
    {"created_at": {"gte": 10**30}},
    {"created_at": "x"},
    {"AND": "x"},
    {"AND": ["x"]},
    {"user_id": 7},
    {"user_id": ["victim"]},
    {"nonsense": 1},
]
DEEP = 200  # levels: past the app's limit, far below a parser's
SAMPLE = {  # plausible values for required fields, by name (else by type)
    "user_id": "victim",
    "role": "service",
    "messages": [{"role": "user", "content": "I like jazz"}],
    "items": [{"content": "x"}],
    "query": "jazz",
    "content": "x",
    "category": "diet",
    "key": "kind",
    "value": "vegan",
}
BY_TYPE = {"string": "x", "integer": 1, "number": 0.5, "boolean": False, "array": [], "object": {}}


@dataclass
class Case:
    kind: str  # what is hostile about it (totals are kept per kind)
    method: str
    url: str
    strict: bool  # True: only a 4xx will do; False: anything below 500
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def http_headers(self, key: str) -> dict[str, bytes]:
        """The headers as bytes (UTF-8: a client may send any), with ``key`` as bearer."""
        return {k: v.encode() for k, v in self.headers.items()} | {
            "authorization": f"Bearer {key}".encode()
        }

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.method} {self.url[:120]} {(self.body or b'')[:120]!r}"


def dumps(value: Any) -> bytes:
    """JSON as a client sends it: ASCII, so an unpaired surrogate is a ``\\ud800`` escape."""
    return json.dumps(value).encode()


class Schema:
    def __init__(self, spec: dict) -> None:
        self.spec = spec

    def resolve(self, schema: dict) -> dict:
        while "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            schema = self.spec["components"]["schemas"][name]
        return schema

    def types(self, schema: dict) -> set[str] | None:
        """The JSON types a value may have (None: any)."""
        schema = self.resolve(schema)
        if "anyOf" in schema or "oneOf" in schema:
            out: set[str] = set()
            for part in schema.get("anyOf", schema.get("oneOf")):
                t = self.types(part)
                if t is None:
                    return None
                out |= t
            return out
        if "enum" in schema and "type" not in schema:
            return {"string"}
        t = schema.get("type")
        if t is None:
            return None
        return set(t) if isinstance(t, list) else {t}

    def is_time(self, schema: dict) -> bool:
        """A date/time string (pydantic also takes a number: seconds since the epoch)."""
        schema = self.resolve(schema)
        parts = schema.get("anyOf", schema.get("oneOf", [schema]))
        return any(self.resolve(p).get("format", "").startswith(("date", "time")) for p in parts)

    def sample(self, name: str, schema: dict) -> Any:
        if name in SAMPLE:
            return SAMPLE[name]
        schema = self.resolve(schema)
        if "enum" in schema:
            return schema["enum"][0]
        for t in sorted(self.types(schema) or {"string"}):
            if t != "null":
                return BY_TYPE[t]
        return None

    def body(self, op: dict) -> tuple[dict, dict] | None:
        """(properties, a base body with every required field filled), or None."""
        content = op.get("requestBody", {}).get("content", {}).get("application/json")
        if content is None:
            return None
        schema = self.resolve(content["schema"])
        props = schema.get("properties", {})
        base = {n: self.sample(n, props[n]) for n in schema.get("required", []) if n in props}
        if "user_id" in props:
            base["user_id"] = "victim"
        return props, base


def cases(spec: dict, path_values: dict[str, str], skip: set[tuple[str, str]]) -> Iterator[Case]:
    """Every hostile case for every operation of ``spec`` but those in ``skip``.

    ``path_values``: a valid value per path parameter name (an id of a seeded memory,
    a key); other path parameters get "x".
    """
    schema = Schema(spec)
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if (method.upper(), path) in skip:
                continue
            yield from _operation(schema, method.upper(), path, op, path_values)


def _operation(schema: Schema, method: str, path: str, op: dict, values: dict) -> Iterator[Case]:
    params = op.get("parameters", [])
    path_params = {p["name"]: values.get(p["name"], "x") for p in params if p["in"] == "path"}
    query = {"user_id": "victim"} if any(p["name"] == "user_id" for p in params) else {}
    body = schema.body(op)
    base_body = dumps(body[1]) if body else None
    json_h = {"content-type": "application/json"}

    def url(pp: dict[str, str] | None = None, q: str | None = None) -> str:
        concrete = path
        for name, value in (pp or path_params).items():
            concrete = concrete.replace(f"{{{name}}}", value)
        extra = urlencode(query)
        tail = "&".join(x for x in (extra, q) if x)
        return concrete + (f"?{tail}" if tail else "")

    def case(kind: str, strict: bool = True, **kw: Any) -> Case:
        kw.setdefault("url", url())
        kw.setdefault("body", base_body)
        headers = kw.pop("headers", {})
        return Case(kind, method, strict=strict, headers=json_h | headers, **kw)

    # Hostile bytes in any body, whatever the route reads: the guard's job.
    for name, text in TEXT.items():
        yield case(f"body: {name} in a stray string", body=dumps({"user_id": "victim", "k": text}))
        yield case(f"body: {name} in a key", body=dumps({"user_id": "victim", text: "v"}))
    deep: Any = "x"
    for _ in range(DEEP):
        deep = {"a": [deep]}
    yield case("body: nested 400 deep", body=dumps({"user_id": "victim", "deep": deep}))
    yield case("body: 100,000 open brackets", body=b"[" * 100_000 + b"]" * 100_000)
    # Path and query parameters.
    for name in path_params:
        for kind, raw in RAW_TEXT.items():  # raw surrogate bytes decode to U+FFFD: valid
            yield case(f"path: {kind}", kind == "NUL", url=url(path_params | {name: raw}))
    for p in params:
        if p["in"] != "query":
            continue
        types = schema.types(p.get("schema", {})) or {"string"}
        for kind, raw in RAW_TEXT.items():
            yield case(f"query: {kind}", kind == "NUL", url=url(q=f"{quote(p['name'])}={raw}"))
        if types & {"integer", "number"}:
            for kind, text in INT_TEXT.items():
                strict = kind in ("non-ASCII digits", "superscript")
                q = urlencode({p["name"]: text})
                yield case(f"query int: {kind}", strict=strict, url=url(q=q))
    for p in params:
        if p["in"] == "header" and p["name"].lower() == "if-match":
            for value in IF_MATCH:
                # "0" is the version a never-configured tenant's settings report (GET
                # answers it, the console sends it back): a valid precondition there.
                strict = not (value == '"0"' and path.endswith("/tenant/settings"))
                yield case("header: If-Match", strict=strict, headers={"if-match": value})
    if body is None:
        return
    props, base = body
    # The whole body of the wrong JSON type.
    for whole in ([], "x", 7, None, True, [base]):
        yield case("body: wrong JSON type", body=dumps(whole))
    for name, prop in props.items():
        types = schema.types(prop)
        for kind, text in TEXT.items():
            yield case(f"field: {kind}", body=dumps(base | {name: text}))
            yield case(f"field: {kind} nested", body=dumps(base | {name: {"k": [text]}}))
        if types is None:
            continue
        valid = types | ({"integer"} if "number" in types else set())
        if schema.is_time(prop):
            valid |= {"integer", "number"}
        for t in types & WRONG.keys():
            for wrong in WRONG[t]:
                if _json_type(wrong) not in valid:
                    yield case("field: wrong JSON type", body=dumps(base | {name: wrong}))
        if "null" not in types and name in base:
            yield case("field: null", body=dumps(base | {name: None}))
        if types & {"integer", "number"}:
            for kind, n in INTS.items():
                yield case(f"field int: {kind}", strict=False, body=dumps(base | {name: n}))
            yield case("field int: non-ASCII digits", body=dumps(base | {name: "١٢"}))
        if name == "filters":
            for f in FILTERS:
                yield case("mem0 filters: wrong shape", body=dumps(base | {name: f}))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def row_counts(dsn: str, tenant: str | None = None) -> dict[str, int]:
    """Rows per table (of ``tenant`` only: the tables with a tenant_id), to show that
    hostile input changed nothing."""
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT t.table_name FROM information_schema.tables t WHERE t.table_schema ="
                " 'public' AND t.table_type = 'BASE TABLE' AND (%(t)s::text IS NULL OR EXISTS"
                " (SELECT 1 FROM information_schema.columns c WHERE c.table_schema = 'public'"
                " AND c.table_name = t.table_name AND c.column_name = 'tenant_id'))",
                {"t": tenant},
            )
        ]
        where = " WHERE tenant_id = %(t)s" if tenant is not None else ""
        params = {"t": tenant} if tenant is not None else None
        return {
            t: conn.execute(f'SELECT count(*) FROM "{t}"{where}', params).fetchone()[0]
            for t in tables
        }


def verdict(case: Case, status: int, text: str) -> str | None:
    """What is wrong with the answer to ``case`` (None: nothing)."""
    if status >= 500 or (case.strict and not 400 <= status < 500):
        return f"{case.label} -> {status} {text[:200]}"
    if status >= 400:
        try:
            code = json.loads(text)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if not code:
            return f"{case.label} -> {status} without the error shape: {text[:200]}"
    return None
