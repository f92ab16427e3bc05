"""Tenant settings on real Postgres: overrides win over the environment, other tenants keep
theirs, every change is audited, and a change reaches another replica's cache at once."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from fastapi.exceptions import RequestValidationError
from psycopg.types.json import Jsonb

from serve_app.auth import Principal
from serve_app.db.migrations import available
from serve_app.db.pool import open_pool
from serve_app.errors import ApiError
from serve_app.services.tenants import TenantService, tenant_service
from serve_app.settings import Settings
from serve_app.store.quota import Quota
from serve_app.store.tenants import TenantStore

ENV = Settings().with_(
    quota={"max_memories_per_user": 100, "max_facts_per_tenant": 7},
    lifecycle={"retention_s": {"episodic": 3600.0}},
    extract={"custom_instructions": "env instructions"},
)
ADMIN = Principal(str(uuid.uuid4()), "acme", "admin")


@pytest.fixture
async def pool(fresh_db):
    pool = await open_pool(fresh_db, ENV, min_size=1)
    await pool.wait()
    yield pool
    await pool.close()


async def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_tenant_value_wins_other_tenant_unaffected_and_history(pool):
    svc = TenantService(TenantStore(pool), ENV, ["gpt-4o-mini"])
    before = await svc.effective("acme")
    assert before.memory_quota == Quota(100, None) and before.fact_quota == Quota(None, 7)
    assert before.retention_s == {"episodic": 3600.0}
    assert before.guidance.instructions == "env instructions"
    assert before.chat_models == {"gpt-4o-mini"}

    out = await svc.patch(
        "acme",
        {
            "quotas": {"max_memories_per_user": 5},
            "retention": {"episodic": 0, "semantic": 60},
            "chat_models": ["m-a", "m-b"],
            "extraction": {"custom_categories": [{"travel": "trips"}], "excludes": "health"},
        },
        ADMIN,
    )
    assert out["version"] == 1 and out["updated_by"] == uuid.UUID(ADMIN.key_id)
    assert out["effective"]["quotas"]["max_memories_per_user"] == 5
    assert out["effective"]["quotas"]["max_facts_per_tenant"] == 7  # env where not set
    eff = await svc.effective("acme")
    assert eff.memory_quota == Quota(5, None) and eff.fact_quota == Quota(None, 7)
    assert eff.retention_s == {"semantic": 60}  # 0: the tenant keeps episodic forever
    assert eff.chat_models == {"m-a", "m-b"}
    assert eff.guidance.categories == (("travel", "trips"),)
    assert eff.guidance.instructions == "env instructions" and eff.guidance.excludes == "health"
    assert await svc.effective("other") == before  # another tenant: the environment's

    # null returns a value to the environment's; an unchanged PATCH records nothing
    out = await svc.patch("acme", {"quotas": {"max_memories_per_user": None}}, None)
    assert out["version"] == 2 and "quotas" not in out["settings"]
    assert (await svc.effective("acme")).memory_quota == Quota(100, None)
    assert (await svc.patch("acme", {"quotas": {}}, ADMIN))["version"] == 2

    history = await svc.history("acme", limit=10)
    assert [h["version"] for h in history] == [2, 1]
    assert history[0]["actor"] == "cli" and history[0]["changed_by"] is None
    assert history[0]["changes"] == [
        {"field": "quotas.max_memories_per_user", "old": 5, "new": None}
    ]
    assert history[1]["actor"] == ADMIN.actor and history[1]["old"] == {}
    fields = {c["field"] for c in history[1]["changes"]}
    assert {"chat_models", "retention.semantic", "extraction.excludes"} <= fields
    assert [h["version"] for h in await svc.history("acme", limit=10, before_version=2)] == [1]
    assert await svc.history("other", limit=10) == []

    # PUT replaces every override
    out = await svc.replace("acme", {"rate_limits": {"per_user_per_s": 3}}, ADMIN)
    assert out["settings"] == {"rate_limits": {"per_user_per_s": 3}}
    assert (await svc.effective("acme")).chat_models == {"gpt-4o-mini"}


@pytest.mark.parametrize(
    "bad",
    [
        {"quotas": {"max_memories_per_user": "5"}},  # strict: a string is not a number
        {"quotas": {"max_memories_per_user": -1}},
        {"quotas": {"max_memories_per_user": True}},
        {"quotas": {"max_memories": 5}},  # unknown field
        {"retention": {"episodic": 1e12}},
        {"retention": {"archive": 60}},
        {"rate_limits": {"per_user_per_s": float("nan")}},
        {"rate_limits": {"per_key_per_s": 1e-300}},  # below the keys' floor (0.001)
        {"rate_limits": {"per_user_per_s": 5e-324}},
        {"chat_models": []},
        {"chat_models": ["a\nb"]},
        {"extraction": {"custom_categories": [{"a": "x", "b": "y"}]}},
        {"extraction": {"custom_categories": [{"a": "x"}, {"A": "y"}]}},
        {"extraction": {"custom_instructions": "x" * 4001}},
        {"extraction": {"excludes": "nul\x00"}},
        {"unknown": 1},
    ],
)
async def test_invalid_settings_are_refused_and_change_nothing(pool, bad):
    svc = TenantService(TenantStore(pool), ENV)
    with pytest.raises(RequestValidationError):
        await svc.patch("acme", bad, ADMIN)
    with pytest.raises(RequestValidationError):
        await svc.replace("acme", bad, ADMIN)
    assert (await svc.read("acme"))["version"] == 0
    assert await svc.history("acme", limit=5) == []


async def test_migration_0016_drops_rates_stored_below_the_floor(pool):
    """Rates a tenant stored before the floor would not validate when read: the migration
    removes them (back to the environment's), as a versioned change with history."""
    bad = {"rate_limits": {"per_key_per_s": 1e-300, "per_user_per_s": 5e-324}}
    mixed = {"rate_limits": {"per_key_per_s": 0.0005, "per_user_per_s": 2.0}, "chat_models": ["m"]}
    fine = {"rate_limits": {"per_key_per_s": 0.001, "per_user_per_s": 0}}
    async with pool.connection() as conn:
        for tenant, doc in (("t_bad", bad), ("t_mixed", mixed), ("t_fine", fine)):
            await conn.execute("INSERT INTO tenants (id) VALUES (%s)", (tenant,))
            await conn.execute(
                "INSERT INTO tenant_settings (tenant_id, settings, version) VALUES (%s, %s, 3)",
                (tenant, Jsonb(doc)),
            )
        [(_, _, sql)] = [m for m in available() if m[0] == 16]
        await conn.execute(sql)
    svc = TenantService(TenantStore(pool), ENV)
    got = {t: await svc.read(t) for t in ("t_bad", "t_mixed", "t_fine")}
    assert got["t_bad"]["settings"] == {} and got["t_bad"]["version"] == 4
    assert got["t_mixed"]["settings"] == {
        "rate_limits": {"per_user_per_s": 2.0},
        "chat_models": ["m"],
    }
    assert got["t_fine"]["settings"] == fine and got["t_fine"]["version"] == 3
    assert (await svc.effective("t_bad")).rate_per_key == ENV.auth.key_rate_limit_per_s
    [change] = await svc.history("t_mixed", limit=5)
    assert change["actor"] == "migration:0016" and change["version"] == 4
    assert change["changes"] == [{"field": "rate_limits.per_key_per_s", "old": 0.0005, "new": None}]
    assert await svc.history("t_fine", limit=5) == []


async def test_version_conflict_is_409(pool):
    svc = TenantService(TenantStore(pool), ENV)
    await svc.patch("acme", {"chat_models": ["a"]}, ADMIN, version=0)
    with pytest.raises(ApiError) as err:
        await svc.patch("acme", {"chat_models": ["b"]}, ADMIN, version=0)
    assert err.value.status == 409
    assert (await svc.effective("acme")).chat_models == {"a"}


async def test_concurrent_patches_lose_nothing(pool):
    svc = TenantService(TenantStore(pool), ENV)
    fields = [
        "max_memories_per_user",
        "max_memories_per_tenant",
        "max_facts_per_user",
        "max_facts_per_tenant",
    ]
    await asyncio.gather(
        *(svc.patch("acme", {"quotas": {f: i + 1}}, ADMIN) for i, f in enumerate(fields))
    )
    got = await svc.read("acme")
    assert got["version"] == 4 and got["settings"]["quotas"] == {
        f: i + 1 for i, f in enumerate(fields)
    }


async def test_a_change_reaches_another_replica_at_once(pool, fresh_db):
    one, l1 = tenant_service(pool, fresh_db, ENV, ["m"])
    two, l2 = tenant_service(pool, fresh_db, ENV, ["m"])
    try:
        await asyncio.wait_for(asyncio.gather(l1.connected.wait(), l2.connected.wait()), 10)
        assert (await two.effective("acme")).chat_models == {"m"}  # cached by replica two
        assert two.cache.get("acme") is not None
        await one.patch("acme", {"chat_models": ["n"]}, ADMIN)

        async def seen() -> bool:
            return (await two.effective("acme")).chat_models == {"n"}

        await _until(seen, timeout=2.0)
    finally:
        await l1.stop()
        await l2.stop()


def test_bad_environment_fails_at_start():
    with pytest.raises(ValueError, match="unknown types"):
        TenantService(None, Settings().with_(lifecycle={"retention_s": {"archive": 1.0}}))
