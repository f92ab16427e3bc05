"""No input yields a 5xx, on any route: the hostile cases of tests/hostile_input.py for
every operation of the app's own OpenAPI schema, in process (real Postgres, the real
encoder, the real app with its middleware), each a 4xx (or, for an out-of-range number
a route may legitimately serve, below 500), and no table gains or loses a row.

The same cases run over HTTP against the Ray service in tests/security/test_hostile_input.py.
"""

from __future__ import annotations

from collections import Counter

import httpx
import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_app, in_process_services
from tests.hostile_input import Case, cases, row_counts, verdict

KEY = "msk_hostile_service_key_0123456789ab"
ADMIN = "msk_hostile_admin_key_0123456789abcd"
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}


@pytest.fixture
async def world(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN)
    settings.auth.rate_limit_per_s = 0.0  # ~2,000 requests from one key and user
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://t",
            timeout=60,
        ) as client,
    ):
        auth = {"Authorization": f"Bearer {KEY}"}
        r = await client.post(
            "/v1/memories",
            json={"user_id": "victim", "content": "Victim likes jazz"},
            headers=auth,
        )
        assert r.status_code == 201, r.text
        r = await client.put(
            "/v1/facts",
            json={"user_id": "victim", "category": "diet", "key": "kind", "value": "vegan"},
            headers=auth,
        )
        assert r.status_code == 200, r.text
        yield app, client, r.json(), fresh_db, {"memory_id": _memory(fresh_db)}


def _memory(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return str(conn.execute("SELECT id FROM memory_items LIMIT 1").fetchone()[0])


async def send(client: httpx.AsyncClient, case: Case) -> httpx.Response:
    key = ADMIN if "/admin/" in case.url else KEY
    return await client.request(
        case.method,
        case.url,
        content=case.body,
        headers=case.http_headers(key),
    )


async def test_no_hostile_input_gets_a_5xx_or_changes_anything(world):
    app, client, _, dsn, path_values = world
    before = row_counts(dsn)
    kinds: Counter[str] = Counter()
    wrong: list[str] = []
    for case in cases(app.openapi(), path_values, PUBLIC):
        kinds[case.kind] += 1
        r = await send(client, case)
        if (problem := verdict(case, r.status_code, r.text)) is not None:
            wrong.append(problem)
    print(f"hostile input, in process: {sum(kinds.values())} cases, {len(wrong)} wrong")
    assert sum(kinds.values()) >= 1500 and len(kinds) >= 25
    assert not wrong, f"{len(wrong)} wrong answers:\n" + "\n".join(wrong[:40])
    assert row_counts(dsn) == before
