"""Validity through the HTTP API in-process (real Postgres, encoder and retriever):
supersedes on create and batch, PATCH valid_until, as_of / include_invalidated on reads,
the chain on GET and history, facts' intervals, occurred_at on turns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.testing.inprocess import in_process_api

KEY = "msk_validity_test_key_0123456789ab"
ANN = {"user_id": "ann"}


@pytest.fixture
async def client(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, _):
        yield c


async def add(c, content: str, user: str = "ann", **kw) -> dict:
    r = await c.post("/v1/memories", json={"user_id": user, "content": content, **kw})
    assert r.status_code == 201, r.text
    return r.json()


async def search(c, query: str, **kw) -> list[str]:
    r = await c.post("/v1/search", json={"user_id": "ann", "query": query, **kw})
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["results"]]


async def listed(c, **params) -> list[str]:
    r = await c.get("/v1/memories", params={**ANN, **params})
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["memories"]]


async def test_supersedes_retires_the_old_value_everywhere(client):
    c = client
    paris = await add(c, "Ann lives in Paris", valid_from="2025-01-10T00:00:00Z")
    assert paris["valid_from"] == "2025-01-10T00:00:00Z" and paris["valid_until"] is None
    assert "Ann lives in Paris" in await search(c, "where does Ann live?")  # warms the cache
    berlin = await add(
        c, "Ann lives in Berlin", valid_from="2026-06-01T00:00:00Z", supersedes=[paris["id"]]
    )
    assert berlin["supersedes"] == [paris["id"]]
    found = await search(c, "where does Ann live?")
    assert "Ann lives in Berlin" in found and "Ann lives in Paris" not in found
    assert await listed(c) == ["Ann lives in Berlin"]
    ctx = await c.post("/v1/context", json={**ANN, "query": "where does Ann live?"})
    assert ctx.status_code == 200, ctx.text
    assert "Berlin" in ctx.json()["context"] and "Paris" not in ctx.json()["context"]
    # The past and the audit view.
    then = await search(c, "where does Ann live?", as_of="2025-06-01T00:00:00Z")
    assert then == ["Ann lives in Paris"]
    assert set(await search(c, "where does Ann live?", include_invalidated=True)) >= {
        "Ann lives in Paris",
        "Ann lives in Berlin",
    }
    assert await listed(c, as_of="2025-06-01T00:00:00Z") == ["Ann lives in Paris"]
    assert len(await listed(c, include_invalidated="true")) == 2
    # GET and history show the chain.
    old = (await c.get(f"/v1/memories/{paris['id']}", params=ANN)).json()
    assert old["superseded_by"] == berlin["id"] and old["valid_until"] == "2026-06-01T00:00:00Z"
    hist = (await c.get(f"/v1/memories/{paris['id']}/history", params=ANN)).json()
    assert [e["event"] for e in hist["events"]] == ["ADD", "INVALIDATE"]
    assert hist["superseded_by"] == berlin["id"]
    new_hist = (await c.get(f"/v1/memories/{berlin['id']}/history", params=ANN)).json()
    assert new_hist["supersedes"] == [paris["id"]]
    # mem0's get_all lists what is valid now.
    page = await c.post("/mem0/v3/memories/", json={"filters": {"user_id": "ann"}})
    assert page.status_code == 200, page.text
    assert [m["memory"] for m in page.json()["results"]] == ["Ann lives in Berlin"]


@pytest.mark.parametrize("case", ["unknown", "foreign", "retired", "infer"])
async def test_a_bad_supersedes_is_a_4xx_that_writes_nothing(client, case):
    c = client
    mine = await add(c, "Ann drinks tea")
    bobs = await add(c, "Bob drinks coffee", user="bob")
    if case == "retired":
        await add(c, "Ann drinks green tea", supersedes=[mine["id"]])
    target = {"unknown": str(uuid.uuid4()), "foreign": bobs["id"]}.get(case, mine["id"])
    before = await listed(c, include_invalidated="true")
    juice = {"content": "Ann drinks juice", "supersedes": [target], "infer": case == "infer"}
    body = {"user_id": "ann", "items": [{"content": "Ann drinks water"}, juice]}
    r = await c.post("/v1/memories/batch", json=body)
    expected = {"unknown": 404, "foreign": 404, "retired": 409, "infer": 422}[case]
    assert r.status_code == expected, r.text
    assert set(r.json()["error"]) == {"code", "message"}
    assert await listed(c, include_invalidated="true") == before
    bob = (await c.get(f"/v1/memories/{bobs['id']}", params={"user_id": "bob"})).json()
    assert bob["valid_until"] is None


async def test_patch_valid_until_hides_it_from_search_and_context(client):
    c = client
    job = await add(c, "Ann works at Acme as a designer")
    assert "Ann works at Acme as a designer" in await search(c, "where does Ann work?")
    r = await c.patch(
        f"/v1/memories/{job['id']}", params=ANN, json={"valid_until": "2026-01-31T00:00:00Z"}
    )
    assert r.status_code == 200, r.text
    assert r.json()["valid_until"] == "2026-01-31T00:00:00Z"
    assert "Ann works at Acme as a designer" not in await search(c, "where does Ann work?")
    ctx = (await c.post("/v1/context", json={**ANN, "query": "where does Ann work?"})).json()
    assert "Acme" not in ctx["context"]
    events = (await c.get(f"/v1/memories/{job['id']}/history", params=ANN)).json()["events"]
    assert [e["event"] for e in events] == ["ADD", "INVALIDATE"]
    # An interval that ends before it begins is refused and changes nothing.
    bad = await c.patch(
        f"/v1/memories/{job['id']}", params=ANN, json={"valid_from": "2026-03-01T00:00:00Z"}
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    # null: valid again.
    r = await c.patch(f"/v1/memories/{job['id']}", params=ANN, json={"valid_until": None})
    assert r.status_code == 200 and r.json()["valid_until"] is None
    assert "Ann works at Acme as a designer" in await search(c, "where does Ann work?")
    assert (
        await c.patch(f"/v1/memories/{job['id']}", params=ANN, json={"content": None})
    ).status_code == 422


async def test_facts_carry_their_interval(client):
    c = client
    for value, since in (("vegan", "2024-01-01T00:00:00Z"), ("vegetarian", "2026-02-01T00:00:00Z")):
        r = await c.put(
            "/v1/facts",
            json={
                **ANN,
                "category": "constraint",
                "key": "diet",
                "value": value,
                "valid_from": since,
            },
        )
        assert r.status_code == 200, r.text
    assert r.json()["valid_from"] == "2026-02-01T00:00:00Z" and r.json()["valid_until"] is None
    hist = (await c.get("/v1/facts", params={**ANN, "include_inactive": "true"})).json()["facts"]
    assert [(f["value"], f["valid_until"]) for f in hist] == [
        ("vegan", "2026-02-01T00:00:00Z"),
        ("vegetarian", None),
    ]
    then = await c.get("/v1/facts", params={**ANN, "as_of": "2025-05-01T00:00:00Z"})
    assert [f["value"] for f in then.json()["facts"]] == ["vegan"]


async def test_turns_take_occurred_at_and_refuse_the_future(client):
    c = client
    ok = await c.post(
        "/v1/sessions/s1/turns",
        json={
            **ANN,
            "messages": [
                {
                    "role": "user",
                    "content": "I met Ana last Tuesday",
                    "occurred_at": "2026-11-19T18:00:00",
                },  # naive: UTC
                {"role": "assistant", "content": "Nice"},
            ],
        },
    )
    assert ok.status_code == 202, ok.text
    future = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    bad = await c.post(
        "/v1/sessions/s1/turns",
        json={**ANN, "messages": [{"role": "user", "content": "x", "occurred_at": future}]},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    garbage = await c.post(
        "/v1/sessions/s1/turns",
        json={**ANN, "messages": [{"role": "user", "content": "x", "occurred_at": "tuesday"}]},
    )
    assert garbage.status_code == 422
    status = (await c.get("/v1/sessions/s1", params=ANN)).json()
    assert status["turns"] == 2  # the refused calls appended nothing


async def test_facts_list_is_paged_with_a_cursor(client):
    """GET /v1/facts returns at most ``limit`` rows and a cursor; following it yields every
    version once; a bad cursor is a 400 and a limit over the cap a 422 (issue 28: the
    history of a much-corrected fact grew the response without bound)."""
    c = client
    for i in range(5):
        r = await c.put(
            "/v1/facts", json={**ANN, "category": "identity", "key": "city", "value": f"City{i}"}
        )
        assert r.status_code == 200, r.text
    values, cursor, pages = [], None, 0
    while True:
        params = {**ANN, "include_inactive": "true", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        r = await c.get("/v1/facts", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["facts"]) <= 2
        values += [f["value"] for f in body["facts"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert values == [f"City{i}" for i in range(5)] and pages == 3
    bad = await c.get("/v1/facts", params={**ANN, "cursor": "not-a-cursor"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    big = await c.get("/v1/facts", params={**ANN, "limit": 100_000})
    assert big.status_code == 422
