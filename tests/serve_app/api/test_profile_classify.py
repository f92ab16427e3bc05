"""POST /v1/admin/profile/classify in process (real Postgres and encoder behind the app):
today's profile rule on memories written before it, a bounded page per call, only adds
classes, never overrules a pin, one tenant's admin reaches only its own users."""

from __future__ import annotations

import psycopg
import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import bearer_clients, in_process_app, in_process_services

SERVICE = "msk_profile_classify_service_key_012345"


@pytest.fixture
async def api(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=SERVICE)
    settings.context.profile_classify_max = 2  # two memories a call: the cursor is used
    boot = bootstrap(settings, fresh_db)
    async with in_process_services(settings, boot.model, fresh_db, encoder) as services:
        admin, _ = await services.keys.create("default", "admin")
        acme, _ = await services.keys.create("acme", "admin")
        alice, _ = await services.keys.create("default", "user", user_id="alice")
        async with in_process_app(settings, services) as app:
            keys = {"service": SERVICE, "admin": admin, "acme": acme, "alice": alice}
            async with bearer_clients(app, keys) as clients:
                yield clients, fresh_db


async def add(client, content: str, **extra) -> str:
    r = await client.post("/v1/memories", json={"user_id": "bob", "content": content, **extra})
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def profile(client) -> dict[str, str]:
    r = await client.get("/v1/users/bob/profile")
    assert r.status_code == 200, r.text
    return {m["id"]: m["profile_class"] for m in r.json()["memories"]}


async def classify(client, **body) -> dict:
    r = await client.post("/v1/admin/profile/classify", json={"user_id": "bob", **body})
    assert r.status_code == 200, r.text
    return r.json()


async def test_memories_written_before_the_rule_join_the_profile(api):
    c, dsn = api
    nut = await add(c["service"], "I'm allergic to peanuts", type="fact")
    rule = await add(c["service"], "Always answer me in short bullet points")
    city = await add(c["service"], "Lives in Oslo near the fjord")
    await add(c["service"], "Loves green tea, especially sencha")
    named = await add(c["service"], "Plays chess on Sundays")
    assert set(await profile(c["service"])) == {nut, rule, city}  # the rule at write time
    # As written before the rule: no classes. The user unpinned one (false: never in the
    # profile); the extraction model named a class for another.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memory_items SET profile_class = NULL WHERE user_id = 'bob'")
        conn.execute("UPDATE memory_items SET pinned = false WHERE id = %s", (rule,))
        conn.execute("UPDATE memory_items SET profile_class = 'identity' WHERE id = %s", (named,))
    assert await profile(c["service"]) == {named: "identity"}

    # Another tenant's admin reaches nothing of bob's (the same user id, its own tenant).
    assert await classify(c["acme"]) == {
        "user_id": "bob",
        "examined": 0,
        "classified": 0,
        "next": None,
    }
    first = await classify(c["admin"])
    assert first["examined"] == 2 and first["next"] is not None  # the bound, then a cursor
    second = await classify(c["admin"], after=first["next"])
    assert second["examined"] == 1 and second["next"] is None  # nut, city, tea: done
    assert first["classified"] + second["classified"] == 2
    assert await profile(c["service"]) == {
        nut: "constraint",
        city: "identity",
        named: "identity",  # the model's class stands
    }  # the unpinned one stays out, the tea was never profile material
    again = await classify(c["admin"])
    assert again["classified"] == 0 and again["examined"] == 1  # only the tea is left to read


async def test_only_admins_classify_and_bad_input_is_a_422(api):
    c, _ = api
    for who in ("service", "alice"):
        r = await c[who].post("/v1/admin/profile/classify", json={"user_id": "bob"})
        assert r.status_code == 403, r.text
    bad = ({}, {"user_id": ""}, {"user_id": "a\x00b"}, {"user_id": "bob", "after": "not-a-uuid"})
    for body in bad:
        r = await c["admin"].post("/v1/admin/profile/classify", json=body)
        assert r.status_code == 422 and r.json()["error"]["code"], r.text


async def test_a_running_forget_of_the_user_refuses_it_and_changes_nothing(api):
    c, dsn = api
    nut = await add(c["service"], "I'm allergic to peanuts", type="fact")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memory_items SET profile_class = NULL WHERE user_id = 'bob'")
        # a forget of bob that is running (unfinished, its lease live)
        conn.execute(
            "INSERT INTO memory_erasures (tenant_id, user_id, lease_until)"
            " VALUES ('default', 'bob', now() + interval '1 minute')"
        )
    r = await c["admin"].post("/v1/admin/profile/classify", json={"user_id": "bob"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "forget_in_progress", r.text
    assert r.headers["retry-after"]
    assert await profile(c["service"]) == {}  # nothing joined
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memory_erasures SET finished_at = now()")
    assert (await classify(c["admin"]))["classified"] == 1  # once it is done
    assert await profile(c["service"]) == {nut: "constraint"}
