"""``custom_categories`` on /mem0 add is honoured, not dropped (in-process, no LLM): a
verbatim memory keeps them in its metadata, and a malformed list is a 422 that stores
nothing. With an LLM the extraction tags by them (tests/e2e/test_tenant_settings.py)."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_mem0_categories_key_0123456789"
ADD = "/mem0/v3/memories/add/"
CATEGORIES = [{"travel": "trips and flights"}, {"food": "diet"}]


@pytest.fixture
async def client(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        yield c


async def test_custom_categories_are_kept_with_the_memory(client):
    c = client
    body = {
        "messages": [{"role": "user", "content": "I fly to Rome in May"}],
        "user_id": "ann",
        "infer": False,
        "metadata": {"src": "app"},
        "custom_categories": CATEGORIES,
    }
    r = await c.post(ADD, json=body)
    assert r.status_code == 200, r.text
    [added] = r.json()["results"]
    got = (await c.get(f"/mem0/v1/memories/{added['id']}/")).json()
    assert got["metadata"] == {"src": "app", "custom_categories": CATEGORIES}


@pytest.mark.parametrize(
    "bad",
    [
        {"travel": "trips"},  # mem0's shape is a list of {name: description}
        [{"travel": "trips", "food": "diet"}],
        [{"travel": 3}],
        [{"": "empty name"}],
        ["travel"],
        [{"travel": "a"}, {"Travel": "b"}],
    ],
)
async def test_malformed_custom_categories_are_a_422_that_stores_nothing(client, bad):
    c = client
    body = {
        "messages": [{"role": "user", "content": "I like tea"}],
        "user_id": "bo",
        "infer": False,
        "custom_categories": bad,
    }
    r = await c.post(ADD, json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
    assert "custom_categories" in r.json()["error"]["message"]
    page = await c.post("/mem0/v3/memories/", json={"filters": {"user_id": "bo"}})
    assert page.json()["count"] == 0
