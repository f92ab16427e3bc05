"""mem0's entity delete of an agent forgets the agent's shared (``@agent``) memories as well
as its users' ones, within the caller's tenant only. In-process over real Postgres and the
real encoder; two tenants with an agent of the same name."""

from __future__ import annotations

import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_client, in_process_app, in_process_services

KEY = "msk_mem0_entities_key_0123456789ab"
DELETE = "/mem0/v2/entities/agent/helper/"


@pytest.fixture
async def clients(fresh_db, encoder):
    """(default tenant's service client, tenant acme's), each with the same memories:
    alice's with agent helper, helper's shared one, and an org-wide one."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
    ):
        assert await services.tenants.store.create("acme")
        acme_key, _ = await services.keys.create("acme", "service")
        async with bearer_client(app, KEY) as ours, bearer_client(app, acme_key) as acme:
            for c in (ours, acme):
                for body in (
                    {"user_id": "alice", "agent_id": "helper", "content": "alice asked helper"},
                    {"scope": "agent", "agent_id": "helper", "content": "helper knows SQL"},
                    {"scope": "org", "content": "the office opens at nine"},
                ):
                    r = await c.post("/v1/memories", json=body)
                    assert r.status_code == 201, r.text
            yield ours, acme


def kept(dsn: str) -> set[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT tenant_id, content FROM memory_items").fetchall()
    return set(rows)


async def test_deleting_an_agent_forgets_its_shared_memories_in_the_callers_tenant_only(
    clients, fresh_db
):
    ours, acme = clients
    r = await ours.delete(DELETE)
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] == 2  # alice's with helper, and helper's shared one
    assert kept(fresh_db) == {
        ("default", "the office opens at nine"),
        ("acme", "alice asked helper"),
        ("acme", "helper knows SQL"),
        ("acme", "the office opens at nine"),
    }
    assert (await ours.delete(DELETE)).status_code == 404  # nothing of helper is left here
    # an agent with only shared memories is found and deleted too
    r = await acme.delete("/v1/memories", params={"user_id": "alice"})
    assert r.status_code == 200, r.text
    r = await acme.delete(DELETE)
    assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
    assert kept(fresh_db) == {
        ("default", "the office opens at nine"),
        ("acme", "the office opens at nine"),
    }


async def test_entity_list_is_bounded_by_a_setting_with_exact_totals(fresh_db, encoder):
    """GET /mem0/v1/entities/ lists at most MEMSERVE_MAX_ENTITIES_LISTED of each kind
    (it returned every user of the tenant in one response); the totals stay exact."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    settings.limits.entities_listed = 2
    boot = bootstrap(settings, fresh_db)
    async with (
        in_process_services(settings, boot.model, fresh_db, encoder) as services,
        in_process_app(settings, services) as app,
        bearer_client(app, KEY) as c,
    ):
        for user in ("u1", "u2", "u3"):
            r = await c.post("/v1/memories", json={"user_id": user, "content": f"{user} likes tea"})
            assert r.status_code == 201, r.text
        r = await c.get("/mem0/v1/entities/")
        assert r.status_code == 200, r.text
        body = r.json()
        users = [e["name"] for e in body["results"] if e["type"] == "user"]
        assert users == ["u1", "u2"]
        assert body["total_users"] == 3 and body["count"] == 3
        assert all("kind_total" not in e for e in body["results"])
