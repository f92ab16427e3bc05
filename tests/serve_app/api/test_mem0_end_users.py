"""mem0 v3 search and get_all name the end user inside ``filters``: the rate-limit bucket is
that user's (one user of a service key running dry leaves the others served), and the
owner is the same user (a top-level ``user_id`` that disagrees is a 400). In-process over
real Postgres and the real encoder."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_mem0_end_users_key_0123456789"
SEARCH = "/mem0/v3/memories/search/"
LIST = "/mem0/v3/memories/"


@pytest.fixture
async def client(fresh_db, encoder):
    # ~4 searches per end user, refilled far slower than the test runs
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY).with_(
        auth={"rate_limit_per_s": 0.01, "rate_limit_burst": 4}
    )
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        for user in ("alice", "bob"):
            r = await c.post("/v1/memories", json={"user_id": user, "content": f"{user} likes tea"})
            assert r.status_code == 201, r.text
        yield c


def search(user: str, nested: bool = False) -> dict:
    filters = {"AND": [{"user_id": user}, {"agent_id": "*"}]} if nested else {"user_id": user}
    return {"query": "what does the user like", "filters": filters}


async def test_each_end_user_named_in_filters_has_its_own_bucket(client):
    c = client
    statuses = [(await c.post(SEARCH, json=search("alice"))).status_code for _ in range(8)]
    assert 429 in statuses and statuses[0] == 200, statuses  # alice ran dry ...
    for user, nested in (("bob", False), ("carol", True)):  # ... the others did not
        r = await c.post(SEARCH, json=search(user, nested))
        assert r.status_code == 200, r.text
    r = await c.post(LIST, json={"filters": {"user_id": "dave"}})
    assert r.status_code == 200, r.text


async def test_the_owner_is_the_user_the_filters_name(client):
    c = client
    r = await c.post(SEARCH, json=search("bob", nested=True))
    assert r.status_code == 200, r.text
    assert [m["memory"] for m in r.json()["results"]] == ["bob likes tea"]
    page = await c.post(LIST, json={"filters": {"user_id": "alice"}})
    assert [m["memory"] for m in page.json()["results"]] == ["alice likes tea"]
    # the owner and the bucket are one user: a top-level user_id is honoured, and one
    # that disagrees with the filters is refused rather than charged to another bucket
    page = await c.post(LIST, json={"user_id": "bob"})
    assert [m["memory"] for m in page.json()["results"]] == ["bob likes tea"]
    for path, body in ((SEARCH, search("alice")), (LIST, {"filters": {"user_id": "alice"}})):
        r = await c.post(path, json={**body, "user_id": "carol"})
        assert r.status_code == 400 and "conflicting values for user_id" in r.text, r.text
