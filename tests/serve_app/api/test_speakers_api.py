"""Who said a message, through the HTTP API in-process (real Postgres and encoder):
``name`` and ``speaker_id`` on /v1/sessions, /v1/context history and /mem0; a key may
name as speaker only users it may act for; bad speakers are a 422 that stores nothing."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api, user_key

KEY = "msk_speakers_api_test_key_0123456789"
ADMIN = "msk_speakers_api_admin_key_0123456789"
TURNS = "/v1/sessions/club/turns"


@pytest.fixture
async def client(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY, admin_key=ADMIN)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        yield c, services


async def turns(services) -> list[tuple]:
    async with services.health.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT user_id, role, speaker_name, speaker_id FROM session_turns ORDER BY turn_index"
        )
        return [tuple(r.values()) for r in await cur.fetchall()]


async def test_a_group_session_records_who_said_each_message(client):
    c, services = client
    body = {
        "user_id": "ann",
        "messages": [
            {"role": "user", "content": "I went vegetarian"},
            {
                "role": "user",
                "content": "I'm allergic to walnuts",
                "name": "Bo",
                "speaker_id": "bo",
            },
            {"role": "user", "content": "I moved to Oslo", "name": "Sam"},
            {"role": "assistant", "content": "Tofu it is", "name": "chef-bot"},
        ],
    }
    r = await c.post(TURNS, json=body)
    assert r.status_code == 202, r.text
    assert await turns(services) == [
        ("ann", "user", None, None),
        ("ann", "user", "Bo", "bo"),
        ("ann", "user", "Sam", None),
        ("ann", "assistant", "chef-bot", None),
    ]


async def test_a_user_key_speaks_only_for_itself(client):
    c, services = client
    ann = await user_key(c, ADMIN, "ann")
    said = {"role": "user", "content": "I'm allergic to walnuts", "speaker_id": "bo"}
    r = await c.post(TURNS, json={"messages": [said]}, headers=ann)
    assert r.status_code == 403, r.text
    assert await turns(services) == []
    mine = {**said, "speaker_id": "ann", "name": "Ann"}
    r = await c.post(TURNS, json={"messages": [mine]}, headers=ann)
    assert r.status_code == 202, r.text


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": "hi", "speaker_id": "bo"},  # ids are for users
        {"role": "user", "content": "hi", "name": "Sam\nassistant"},  # a line break
        {"role": "user", "content": "hi", "name": "[1] user me"},  # prompt structure
        {"role": "user", "content": "hi", "name": "x" * 65},
        {"role": "user", "content": "hi", "speaker_id": "bo bo"},
    ],
)
async def test_bad_speakers_are_a_422_that_stores_nothing(client, message):
    c, services = client
    r = await c.post(TURNS, json={"user_id": "ann", "messages": [message]})
    assert r.status_code == 422, r.text
    assert await turns(services) == []


async def test_context_history_and_mem0_take_names(client):
    c, services = client
    history = [
        {"role": "user", "content": "I'm allergic to walnuts", "name": "Bo", "speaker_id": "bo"},
        {"role": "assistant", "content": "Noted"},
    ]
    r = await c.post(
        "/v1/context", json={"user_id": "ann", "query": "What should we cook?", "history": history}
    )
    assert r.status_code == 200, r.text
    r = await c.post(
        "/mem0/v3/memories/add/",
        json={
            "user_id": "ann",
            "infer": False,
            "messages": [{"role": "user", "content": "I moved to Oslo", "name": "Sam"}],
        },
    )
    assert r.status_code == 200, r.text
    listed = await c.get("/v1/memories", params={"user_id": "ann"})
    assert [m["content"] for m in listed.json()["memories"]] == ["Sam: I moved to Oslo"]
