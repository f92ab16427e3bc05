"""mem0 ``get_all`` numbered pages against the real store: each page is one statement
and gives what walking the keyset list page by page gives."""

from __future__ import annotations

import pytest

from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.store import Owner
from serve_app.testing.inprocess import in_process_api
from tests.serve_app.statements import StatementCounter

KEY = "msk_mem0_pages_test_key_0123456789"
ALICE = Owner("default", "alice")


@pytest.fixture
async def stack(fresh_db, encoder):
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY) as (c, services):
        for user, session, n in (("alice", None, 5), ("alice", "s2", 2), ("bob", None, 1)):
            for i in range(n):  # one request each: distinct created_at, newest last
                item = {"content": f"{user} {session} note {i}", "session_id": session}
                r = await c.post("/v1/memories", json={"user_id": user, **item})
                assert r.status_code == 201, r.text
        yield c, services


async def walked(services, number: int, size: int, session_id: str | None) -> tuple[list, int]:
    """What get_all answered before: ``number`` keyset pages, then a count unless the
    page ended the list."""
    cursor, rows = None, []
    for n in range(1, number + 1):
        rows, cursor = await services.memories.list(
            ALICE, limit=size, cursor=cursor, type=None, agent_id=None, session_id=session_id
        )
        if cursor is None and n < number:
            rows = []
            break
    if cursor is None and (rows or number == 1):
        return rows, (number - 1) * size + len(rows)
    everything, _ = await services.memories.list(
        ALICE, limit=1000, cursor=None, type=None, agent_id=None, session_id=session_id
    )
    return rows, len(everything)


async def get_all(c, page: int, size: int, run_id: str | None = None) -> dict:
    filters = {"user_id": "alice"} | ({"run_id": run_id} if run_id else {})
    r = await c.post(
        "/mem0/v3/memories/", params={"page": page, "page_size": size}, json={"filters": filters}
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize(
    ("page", "size", "run_id", "count", "shown"),
    [
        (1, 3, None, 7, 3),  # first page, more follow
        (2, 3, None, 7, 3),  # a middle page
        (3, 3, None, 7, 1),  # the last page gives the count
        (4, 3, None, 7, 0),  # past the end: counted
        (10**20, 3, None, 7, 0),  # far past the end (beyond any OFFSET)
        (1, 7, None, 7, 7),  # one page exactly
        (2, 7, None, 7, 0),  # right after an exact last page
        (1, 5, "s2", 2, 2),  # narrowed to a run
        (2, 1, "s2", 2, 1),
    ],
)
async def test_page_is_one_statement_with_the_keyset_walk_results(
    stack, monkeypatch, page, size, run_id, count, shown
):
    c, services = stack
    await get_all(c, 1, 1)  # the caller's key is looked up once, then cached
    counter = StatementCounter(services.directory.pool)
    monkeypatch.setattr(services.directory.pool, "connection", counter.connection)
    got = await get_all(c, page, size, run_id)
    monkeypatch.undo()
    assert counter.statements == 1
    rows, expected_count = await walked(services, page, size, run_id)
    assert got["count"] == expected_count == count
    assert [r["id"] for r in got["results"]] == [str(r["id"]) for r in rows]
    assert len(got["results"]) == shown
    assert all(r["user_id"] == "alice" for r in got["results"])
    assert (got["next"] is not None) == (page * size < count)
    assert (got["previous"] is not None) == (page > 1)


async def test_pages_cover_the_list_newest_first_without_overlap(stack):
    c, _ = stack
    seen = [m for p in (1, 2, 3) for m in (await get_all(c, p, 3))["results"]]
    assert len({m["id"] for m in seen}) == 7
    created = [m["created_at"] for m in seen]
    assert created == sorted(created, reverse=True)
    assert seen[0]["memory"] == "alice s2 note 1" and seen[-1]["memory"] == "alice None note 0"
