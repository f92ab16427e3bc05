"""``reference_date`` through the HTTP API in-process (real Postgres, encoder and
retriever): "last week" in a question is read against the day it is asked, on
/v1/search, /v1/context and mem0's search, and a bad day is a 422."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_reference_date_key_0123456789ab"
ANN = {"user_id": "ann"}
# What Ann cooked, each on its day (2023-05-10 and 2023-06-07 are Wednesdays).
COOKED = {
    "Ann cooked a mushroom risotto for dinner": "2023-05-10T19:00:00Z",
    "Ann cooked a vegetable lasagna for dinner": "2023-06-07T19:00:00Z",
    "Ann cooked a chickpea curry for dinner": "2023-04-12T19:00:00Z",
}
QUESTION = "What did I cook for dinner last week?"


@pytest.fixture
async def client(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        for content, when in COOKED.items():
            r = await c.post("/v1/memories", json={**ANN, "content": content, "valid_from": when})
            assert r.status_code == 201, r.text
        yield c


async def first_found(c, **kw) -> str:
    r = await c.post("/v1/search", json={**ANN, "query": QUESTION, **kw})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["content"]


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ("2023-06-14", "lasagna"),  # last week: June 5-11
        ("2023-05-17T09:30:00+02:00", "risotto"),  # last week: May 8-14
        ("2023-04-19", "curry"),  # last week: April 10-16
    ],
)
async def test_last_week_is_the_week_before_the_reference_day(client, asked, expected):
    assert expected in await first_found(client, reference_date=asked)


async def test_context_and_mem0_search_read_the_same_reference(client):
    r = await client.post(
        "/v1/context", json={**ANN, "query": QUESTION, "reference_date": "2023-05-17"}
    )
    assert r.status_code == 200, r.text
    # The block's order fuses the message's searches (with and without its time words:
    # serve_app/context/builder.py); that each reads the reference date is
    # tests/serve_app/context/test_levers.py's; here: accepted, and in the block.
    assert any("risotto" in m["content"] for m in r.json()["memories"])
    r = await client.post(
        "/mem0/v3/memories/search/",
        json={"query": QUESTION, "filters": {"user_id": "ann"}, "reference_date": "2023-06-14"},
    )
    assert r.status_code == 200, r.text
    assert "lasagna" in r.json()["results"][0]["memory"]


@pytest.mark.parametrize("bad", ["yesterday", "0001-01-01", "2023-13-01", 12])
async def test_a_bad_reference_date_is_a_422(client, bad):
    for path, body in (
        ("/v1/search", {**ANN, "query": QUESTION, "reference_date": bad}),
        ("/v1/context", {**ANN, "query": QUESTION, "reference_date": bad}),
    ):
        r = await client.post(path, json=body)
        assert r.status_code == 422, (path, r.text)
        assert "reference_date" in r.text
