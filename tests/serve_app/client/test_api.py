"""Both clients send each API call the same way and read its answer into the same type.

They talk over real HTTP to a local ``http.server`` that records every request and
answers what the test scripts (the service itself is covered by tests/e2e/test_client.py).
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from serve_app.client import (
    AsyncMemserveClient,
    MemserveClient,
    NotFound,
    RateLimited,
)
from serve_app.client.routes import ROUTES
from serve_app.schemas import DeletedCount


@dataclass
class Recorder:
    """What the server saw, and what it answers next."""

    url: str
    seen: list[tuple[str, str, dict[str, str], Any, str, dict[str, str]]] = field(
        default_factory=list
    )
    status: int = 204
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def server() -> Iterator[Recorder]:
    rec = Recorder("")

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            url = urlsplit(self.path)
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            ndjson = self.headers.get("content-type") == "application/x-ndjson"
            body = (raw.decode() if ndjson else json.loads(raw)) if raw else None
            auth = self.headers.get("authorization", "")
            extra = {k: v for k, v in self.headers.items() if k.lower() in MARKED}
            query = dict(parse_qsl(url.query))
            rec.seen.append((self.command, url.path, query, body, auth, extra))
            out = b"" if rec.body is None else json.dumps(rec.body).encode()
            self.send_response(rec.status)
            for k, v in rec.headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


MID = "0b7e4f3c-2f0e-4a53-9d6f-1d2b3c4d5e6f"
MARKED = {"if-match", "x-memserve-session", "x-memserve-agent", "x-memserve-occurred-at"}
WHEN = datetime(2026, 3, 1, 12, tzinfo=UTC)
U = {"user_id": "u1"}

# (method name, args, kwargs, (HTTP method, path, query, JSON body)[, headers it sets])
CALLS: list[tuple] = [
    (
        "add",
        ("I like tea",),
        {**U, "tags": ["t"], "type": None},
        ("POST", "/v1/memories", {}, {"user_id": "u1", "content": "I like tea", "tags": ["t"]}),
    ),
    (
        "add_batch",
        ([{"content": "a"}],),
        U,
        ("POST", "/v1/memories/batch", {}, {"user_id": "u1", "items": [{"content": "a"}]}),
    ),
    ("get", (MID,), U, ("GET", f"/v1/memories/{MID}", U, None)),
    (
        "update",
        (MID,),
        {**U, "importance": 0.5},
        ("PATCH", f"/v1/memories/{MID}", U, {"importance": 0.5}),
    ),
    ("delete", (MID,), {}, ("DELETE", f"/v1/memories/{MID}", {}, None)),
    ("list", (), {**U, "limit": 5}, ("GET", "/v1/memories", {**U, "limit": "5"}, None)),
    (
        "delete_scope",
        (),
        {"agent_id": "a", "session_id": "s"},
        ("DELETE", "/v1/memories", {"agent_id": "a", "session_id": "s"}, None),
    ),
    ("history", (MID,), U, ("GET", f"/v1/memories/{MID}/history", U, None)),
    (
        "search",
        ("tea?",),
        {**U, "top_k": 3},
        ("POST", "/v1/search", {}, {"user_id": "u1", "query": "tea?", "top_k": 3}),
    ),
    (
        "context",
        ("tea?",),
        {"history": [("user", "hi"), {"role": "assistant", "content": "yo"}]},
        (
            "POST",
            "/v1/context",
            {},
            {
                "query": "tea?",
                "history": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ],
            },
        ),
    ),
    ("context", ("tea?",), {"history": []}, ("POST", "/v1/context", {}, {"query": "tea?"})),
    (
        "explain_context",
        ("tea?",),
        {**U, "top_k": 2, "rerank": "onnx"},
        (
            "GET",
            "/v1/context",
            {**U, "query": "tea?", "explain": "true", "top_k": "2", "rerank": "onnx"},
            None,
        ),
    ),
    (
        "add_turns",
        ("s1", [("user", "hi")]),
        U,
        (
            "POST",
            "/v1/sessions/s1/turns",
            {},
            {"user_id": "u1", "messages": [{"role": "user", "content": "hi"}]},
        ),
    ),
    ("end_session", ("s1",), {}, ("POST", "/v1/sessions/s1/end", {}, {})),
    ("facts", (), {**U, "category": "diet"}, ("GET", "/v1/facts", {**U, "category": "diet"}, None)),
    (
        "create_key",
        ("user",),
        {**U, "name": "k"},
        ("POST", "/v1/admin/keys", {}, {"role": "user", "user_id": "u1", "name": "k"}),
    ),
    ("list_keys", (), {}, ("GET", "/v1/admin/keys", {}, None)),
    ("get_key", (MID,), {}, ("GET", f"/v1/admin/keys/{MID}", {}, None)),
    ("revoke_key", (MID,), {}, ("DELETE", f"/v1/admin/keys/{MID}", {}, None)),
    ("health", (), {}, ("GET", "/healthz", {}, None)),
    ("ready", (), {}, ("GET", "/readyz", {}, None)),
    (
        "update",
        (MID,),
        {"if_match": 3, "content": "x"},
        ("PATCH", f"/v1/memories/{MID}", {}, {"content": "x"}),
        {"If-Match": '"3"'},
    ),
    ("session_status", ("s1",), U, ("GET", "/v1/sessions/s1", U, None)),
    (
        "add_turns",
        ("s1", [{"role": "user", "content": "hi", "occurred_at": WHEN}]),
        {},
        (
            "POST",
            "/v1/sessions/s1/turns",
            {},
            {
                "messages": [
                    {"role": "user", "content": "hi", "occurred_at": "2026-03-01T12:00:00+00:00"}
                ]
            },
        ),
    ),
    (
        "facts",
        (),
        {**U, "include_inactive": True, "as_of": WHEN},
        (
            "GET",
            "/v1/facts",
            {**U, "include_inactive": "true", "as_of": "2026-03-01T12:00:00+00:00"},
            None,
        ),
    ),
    (
        "set_fact",
        ("diet", "style", "vegan"),
        {**U, "valid_from": WHEN},
        (
            "PUT",
            "/v1/facts",
            {},
            {
                "user_id": "u1",
                "category": "diet",
                "key": "style",
                "value": "vegan",
                "valid_from": "2026-03-01T12:00:00+00:00",
            },
        ),
    ),
    (
        "delete_facts",
        (),
        {**U, "category": "diet"},
        ("DELETE", "/v1/facts", {**U, "category": "diet"}, None),
    ),
    (
        "users",
        (),
        {"limit": 2, "cursor": "bob"},
        ("GET", "/v1/users", {"limit": "2", "cursor": "bob"}, None),
    ),
    (
        "user_sessions",
        ("u1",),
        {"limit": 3},
        ("GET", "/v1/users/u1/sessions", {"limit": "3"}, None),
    ),
    (
        "user_profile",
        ("u1",),
        {"agent_id": "a1"},
        ("GET", "/v1/users/u1/profile", {"agent_id": "a1"}, None),
    ),
    (
        "chat",
        ([("user", "hi")],),
        {"model": "m", "session_id": "s", "temperature": 0.1, "occurred_at": WHEN},
        (
            "POST",
            "/v1/chat/completions",
            {},
            {
                "model": "m",
                "temperature": 0.1,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": False,
            },
        ),
        {"X-Memserve-Session": "s", "X-Memserve-Occurred-At": "2026-03-01T12:00:00+00:00"},
    ),
    ("chat_usage", (), {}, ("GET", "/v1/chat/usage", {}, None)),
    (
        "import_",
        ([{"kind": "memory", "content": "a"}, '{"kind": "fact"}'],),
        U,
        ("POST", "/v1/import", U, '{"kind": "memory", "content": "a"}\n{"kind": "fact"}\n'),
    ),
    ("erase_tenant", ("t1",), {}, ("DELETE", "/v1/admin/data", {"confirm": "t1"}, None)),
    ("tenant_settings", (), {}, ("GET", "/v1/admin/tenant/settings", {}, None)),
    (
        "replace_tenant_settings",
        ({"chat_models": ["a"]},),
        {"if_match": 2},
        ("PUT", "/v1/admin/tenant/settings", {}, {"chat_models": ["a"]}),
        {"If-Match": '"2"'},
    ),
    (
        "patch_tenant_settings",
        ({"quotas": None},),
        {},
        ("PATCH", "/v1/admin/tenant/settings", {}, {"quotas": None}),
    ),
    (
        "tenant_settings_history",
        (),
        {"before": 4},
        ("GET", "/v1/admin/tenant/settings/history", {"before": "4"}, None),
    ),
    ("models", (), {}, ("GET", "/v1/admin/models", {}, None)),
    ("drop_model", ("e5",), {}, ("DELETE", "/v1/admin/models/e5", {}, None)),
    (
        "dead_letters",
        (),
        {**U, "limit": 5},
        ("GET", "/v1/admin/extraction/dead-letters", {**U, "limit": "5"}, None),
    ),
    (
        "retry_dead_letters",
        (),
        {"session_id": "s1"},
        ("POST", "/v1/admin/extraction/dead-letters/retry", {}, {"session_id": "s1"}),
    ),
    ("consolidate", ("u1",), {}, ("POST", "/v1/admin/consolidate", {}, U)),
    (
        "classify_profile",
        ("u1",),
        {"after": "00000000-0000-0000-0000-000000000007"},
        (
            "POST",
            "/v1/admin/profile/classify",
            {},
            {**U, "after": "00000000-0000-0000-0000-000000000007"},
        ),
    ),
    (
        "llm_usage",
        (),
        {"group_by": ["day", "user"], "since": "2026-11-01", "top_users": 5},
        (
            "GET",
            "/v1/admin/usage",
            {"group_by": "day,user", "since": "2026-11-01", "top_users": "5"},
            None,
        ),
    ),
    (
        "events",
        (),
        {
            "after": "c1",
            "types": ["memory.added", "fact.set"],
            "user_id": "u1",
            "limit": 5,
            "include_content": True,
        },
        (
            "GET",
            "/v1/events",
            {
                "after": "c1",
                "types": "memory.added,fact.set",
                "user_id": "u1",
                "limit": "5",
                "include_content": "true",
            },
            None,
        ),
    ),
    (
        "create_webhook",
        ("http://h/x",),
        {"types": ["memory.added"], "include_content": True},
        (
            "POST",
            "/v1/admin/webhooks",
            {},
            {"url": "http://h/x", "types": ["memory.added"], "include_content": True},
        ),
    ),
    ("webhooks", (), {}, ("GET", "/v1/admin/webhooks", {}, None)),
    ("get_webhook", ("w1",), {}, ("GET", "/v1/admin/webhooks/w1", {}, None)),
    (
        "update_webhook",
        ("w1",),
        {"enabled": False},
        ("PATCH", "/v1/admin/webhooks/w1", {}, {"enabled": False}),
    ),
    ("delete_webhook", ("w1",), {}, ("DELETE", "/v1/admin/webhooks/w1", {}, None)),
    (
        "webhook_deliveries",
        ("w1",),
        {"status": "dead", "limit": 3},
        ("GET", "/v1/admin/webhooks/w1/deliveries", {"status": "dead", "limit": "3"}, None),
    ),
    ("replay_webhook", ("w1",), {}, ("POST", "/v1/admin/webhooks/w1/replay", {}, None)),
    (
        "add_document",
        ("# Policy\nNo pets.",),
        {"content_type": "text/markdown", "document_id": "d1", "title": "Policy", "tags": ["hr"]},
        (
            "POST",
            "/v1/documents",
            {},
            {
                "document_id": "d1",
                "title": "Policy",
                "tags": ["hr"],
                "text": "# Policy\nNo pets.",
                "content_type": "text/markdown",
            },
        ),
    ),
    (
        "documents",
        (),
        {"scope": "org", "tag": "hr", "limit": 5},
        ("GET", "/v1/documents", {"scope": "org", "tag": "hr", "limit": "5"}, None),
    ),
    (
        "document",
        ("d1",),
        {"agent_id": "a1", "limit": 2},
        ("GET", "/v1/documents/d1", {"agent_id": "a1", "limit": "2"}, None),
    ),
    ("delete_document", ("d1",), {}, ("DELETE", "/v1/documents/d1", {}, None)),
    (
        "document_job",
        ("j1",),
        {"agent_id": "a1"},
        ("GET", "/v1/documents/jobs/j1", {"agent_id": "a1"}, None),
    ),
    (
        "cancel_document_job",
        ("j1",),
        {"agent_id": "a1"},
        ("DELETE", "/v1/documents/jobs/j1", {"agent_id": "a1"}, None),
    ),
]
STREAMED = {"export", "chat_stream", "import_all"}  # see test_streams.py
MULTIPART = {"upload_document"}  # see test_upload_document_sends_one_multipart_file


def test_every_public_method_has_a_request_case():
    public = {n for n in dir(MemserveClient) if not n.startswith("_")} - {"close"}
    assert public == {name for name, *_ in CALLS} | STREAMED | MULTIPART
    assert public == {n for n in dir(AsyncMemserveClient) if not n.startswith("_")} - {"aclose"}


async def test_sync_and_async_send_the_same_requests(server: Recorder):
    expected = [(*case[3], "Bearer k1", case[4] if len(case) > 4 else {}) for case in CALLS]
    with MemserveClient(server.url, "k1") as m:
        for name, args, kwargs, *_ in CALLS:
            assert getattr(m, name)(*args, **kwargs) is None  # 204: no body
    assert server.seen == expected
    server.seen.clear()
    async with AsyncMemserveClient(server.url, "k1") as am:
        for name, args, kwargs, *_ in CALLS:
            assert await getattr(am, name)(*args, **kwargs) is None
    assert server.seen == expected


async def test_answers_become_typed_results_and_errors(server: Recorder):
    server.status, server.body = 200, {"deleted": 3}
    m, am = MemserveClient(server.url), AsyncMemserveClient(server.url)
    assert m.delete_scope(user_id="u") == DeletedCount(deleted=3)
    assert await am.delete_scope(user_id="u") == DeletedCount(deleted=3)
    assert m.chat([("user", "hi")]) == {"deleted": 3}  # no model: the JSON as is
    assert server.seen[0][4] == ""  # no key: no Authorization header
    server.status, server.body = 404, {"error": {"code": "not_found", "message": "gone"}}
    with pytest.raises(NotFound, match="gone"):
        m.get(MID)
    with pytest.raises(NotFound, match="gone"):
        await am.get(MID)
    server.status, server.headers = 429, {"Retry-After": "4"}
    with pytest.raises(RateLimited) as e:
        await am.search("q")
    assert e.value.retry_after == 4.0
    m.close()
    await am.aclose()


def test_methods_keep_their_names_docs_and_signatures():
    m = MemserveClient("http://127.0.0.1:1")
    assert m.context.__name__ == "context" and "prompt block" in (m.context.__doc__ or "")
    params = inspect.signature(m.add).parameters
    assert list(params) == ["content", "user_id", "fields"]
    assert params["user_id"].kind is inspect.Parameter.KEYWORD_ONLY
    assert (
        inspect.signature(m.add_turns).parameters["messages"].kind.name == "POSITIONAL_OR_KEYWORD"
    )
    m.close()


def template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\{[a-z_]+\\}", "[^/]+", re.escape(path)) + "$")


def test_each_method_sends_the_route_the_table_maps_it_to():
    by_name = {n: route for route, names in ROUTES.items() for n in names}
    for name, _, _, (method, path, *_), *_ in CALLS:
        assert by_name[name][0] == method and template(by_name[name][1]).match(path), name


def test_upload_document_sends_one_multipart_file():
    """``upload_document`` posts the file and its fields as multipart form data (the
    recorder above reads JSON bodies only, so this checks the request httpx builds)."""
    call = MemserveClient.upload_document.build(
        b"%PDF-1.4 tiny",
        filename="p.pdf",
        content_type="application/pdf",
        tags=["hr"],
        metadata={"v": 1},
        document_id="d1",
    )
    assert (call.method, call.path) == ("POST", "/v1/documents")
    assert call.files == {"file": ("p.pdf", b"%PDF-1.4 tiny", "application/pdf")}
    assert call.form == {
        "document_id": "d1",
        "content_type": "application/pdf",
        "tags": ["hr"],
        "metadata": '{"v": 1}',
    }
