"""The stranger gate: no request's body is read before its key is checked, on any route.

Unit level: the gate over a recording ASGI app counts ``receive`` calls. App level: the
real app (composition root over real Postgres and the real encoder) is asked, without
a key, every operation of its own OpenAPI schema plus /mcp and unknown paths, with a
body that is not JSON and one over the size limit: each is a 401 (the body would have
made it a 400, 413 or 422 had it been read).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from serve_app.api.gate import StrangerGate
from serve_app.auth import PRINCIPAL
from serve_app.bootstrap import bootstrap
from serve_app.db.pool import open_pool
from serve_app.services.auth import authenticator, key_store
from serve_app.settings import AuthSettings, Settings
from serve_app.store.keys import seed_key
from serve_app.testing.inprocess import in_process_app, in_process_services

KEY = "msk_gate_service_key_0123456789abcdef"
DELAY = 0.2


@pytest.fixture
async def auth(fresh_db):
    s = AuthSettings(bad_key_per_s=1, bad_key_burst=3, negative_ttl_s=30, stranger_delay_s=DELAY)
    pool = await open_pool(fresh_db, Settings())
    keys, listener = key_store(pool, fresh_db, s)
    await asyncio.wait_for(listener.connected.wait(), 10)
    seed_key(fresh_db, "t", "service", KEY, "gate")
    try:
        yield authenticator(keys, s)
    finally:
        await listener.stop()
        await pool.close()


class Recorder:
    """The routed app: records who got through and how often anyone read the body."""

    def __init__(self) -> None:
        self.reached: list[object] = []
        self.reads = 0

    async def app(self, scope, receive, send):
        self.reached.append(scope.get("state", {}).get(PRINCIPAL))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(self, gate, header: bytes | None, path: str = "/v1/search"):
        sent: list[dict] = []
        headers = [(b"authorization", header)] if header is not None else []
        scope = {
            "type": "http",
            "path": path,
            "headers": headers,
            "client": ("10.0.2.1", 5555),
            "method": "POST",
        }

        async def receive():
            self.reads += 1
            return {"type": "http.request", "body": b"{not json", "more_body": False}

        await gate(scope, receive, _appender(sent))
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], body


def _appender(sent: list[dict]):
    async def send(message):
        sent.append(message)

    return send


@pytest.mark.parametrize(
    "header",
    [None, b"", b"Basic xyz", b"Bearer", b"Token  ", b"Bearer msk_gate_unknown", b"x" * 600],
)
async def test_no_valid_key_is_refused_without_reading_the_body(auth, header):
    rec = Recorder()
    gate = StrangerGate(rec.app, lambda: auth)
    started = time.monotonic()
    status, body = await rec.call(gate, header)
    assert status == 401 and b'"unauthorized"' in body
    assert rec.reads == 0 and rec.reached == []
    assert time.monotonic() - started >= DELAY  # held like any stranger: a flood slows down


async def test_a_flood_without_keys_runs_out_of_budget_like_bad_keys(auth):
    rec = Recorder()
    gate = StrangerGate(rec.app, lambda: auth)
    codes = [(await rec.call(gate, None))[0] for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    # The address is out of budget: a never-seen key is refused without a lookup too.
    assert (await rec.call(gate, b"Bearer msk_gate_never_seen"))[0] == 429
    assert (await rec.call(gate, f"Bearer {KEY}".encode()))[0] == 204  # a seeded key passes
    assert rec.reads == 0


async def test_a_valid_key_reaches_the_app_with_its_caller(auth):
    rec = Recorder()
    gate = StrangerGate(rec.app, lambda: auth)
    assert (await rec.call(gate, f"Bearer {KEY}".encode()))[0] == 204
    assert rec.reached[0].tenant_id == "t" and rec.reached[0].role == "service"


@pytest.fixture
async def app(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings.auth.stranger_delay_s = 0.0  # the hold is tested above; here only the answers
    settings.auth.bad_key_per_s = 0.0  # no budget: every stranger gets its 401
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        yield app


def stranger(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def operations(app) -> list[tuple[str, str]]:
    """(method, concrete path) of every operation of the app's OpenAPI schema."""
    ops = []
    for path, item in app.openapi()["paths"].items():
        concrete = path
        for name in ("memory_id", "key_id"):
            concrete = concrete.replace(f"{{{name}}}", "00000000-0000-0000-0000-000000000000")
        concrete = concrete.replace("{", "").replace("}", "")  # other params: any text
        ops.extend((method.upper(), concrete) for method in item)
    return ops


PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    # OAuth protected resource metadata (RFC 9728): how MCP clients find where to sign in
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/mcp"),
    ("GET", "/.well-known/oauth-protected-resource/mcp/tenant"),  # a tenant's sign-in
}


async def test_every_route_refuses_a_stranger_before_reading_the_body(app):
    ops = operations(app)
    assert len(ops) >= 30
    unknown = [("POST", "/mcp"), ("GET", "/mcp"), ("POST", "/no/such/route"), ("PUT", "/")]
    bodies = {
        "not JSON": b'{"user_id": "u", "content": ',
        "too big": b"x" * 2_000_000,
        "deep": b"[" * 50_000 + b"]" * 50_000,
    }
    refused = []
    async with stranger(app) as c:
        for method, path in ops + unknown:
            if (method, path) in PUBLIC:
                continue
            for kind, body in bodies.items():
                for header in ({}, {"Authorization": "Basic abc"}):
                    r = await c.request(method, path, content=body, headers=_JSON | header)
                    refused.append((method, path, kind, r.status_code))
                    assert r.status_code == 401, (method, path, kind, header, r.text)
                    assert r.json()["error"]["code"] == "unauthorized"
    assert len(refused) >= 6 * 30


async def test_public_routes_answer_without_a_key(app):
    async with stranger(app) as c:
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/readyz")).status_code == 200
        assert (await c.get("/openapi.json")).status_code == 200
        assert (await c.get("/docs")).status_code == 200
        meta = await c.get("/.well-known/oauth-protected-resource/mcp")
        assert meta.status_code == 200 and meta.json()["resource"] == "http://t/mcp"
        assert meta.json()["authorization_servers"] == []  # no tenant advertises one
        r = await c.post("/mcp", json={})
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == (
            'Bearer resource_metadata="http://t/.well-known/oauth-protected-resource/mcp"'
        )
        r = await c.post("/mcp/acme", json={})  # a tenant's endpoint: its own document
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == (
            'Bearer resource_metadata="http://t/.well-known/oauth-protected-resource/mcp/acme"'
        )
        meta = await c.get("/.well-known/oauth-protected-resource/mcp/acme")
        assert meta.status_code == 200 and meta.json()["resource"] == "http://t/mcp/acme"
        bad = await c.get("/.well-known/oauth-protected-resource/mcp/a%20b")
        assert bad.status_code == 422


async def test_a_known_key_still_gets_its_body_read(app):
    async with stranger(app) as c:
        headers = {"Authorization": f"Bearer {KEY}"} | _JSON
        r = await c.post("/v1/memories", content=b'{"user_id": "u", "content": ', headers=headers)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = await c.post("/v1/memories", content=b"x" * 2_000_000, headers=headers)
        assert r.status_code == 413


_JSON = {"content-type": "application/json"}


async def test_sign_in_lookups_that_find_nothing_spend_the_strangers_budget(fresh_db, encoder):
    """A tenant's sign-in document is public: a lookup of a tenant with nothing to show
    costs the caller's failed-lookup budget like an unknown key, so a stranger cannot
    make the service look up names without end."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings.auth.stranger_delay_s = 0.0
    settings.auth.bad_key_per_s = 0.001
    settings.auth.bad_key_burst = 3
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
        stranger(app) as c,
    ):
        codes = [
            (await c.get(f"/.well-known/oauth-protected-resource/mcp/nobody-{i}")).status_code
            for i in range(5)
        ]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
