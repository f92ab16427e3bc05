"""POST /v1/import all or nothing, validated before it writes, keeping what the records say;
PUT /v1/facts under the fact quota; writes during a running forget are 409s. In process
(no Ray): real Postgres, the real encoder, the HTTP routes over an ASGI transport."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from serve_app.api import portability as portability_route
from serve_app.bootstrap import bootstrap
from serve_app.settings import Settings
from serve_app.store.erasure import Erasure
from serve_app.testing.inprocess import in_process_api

KEY = "msk_import_test_key_0123456789abcdef"


@pytest.fixture
async def make_stack(fresh_db, encoder):
    stacks = []

    async def make(**groups):
        settings = Settings(database_url=fresh_db, bootstrap_key=KEY).with_(**groups)
        boot = bootstrap(settings, fresh_db)
        api = in_process_api(settings, boot.model, fresh_db, encoder, KEY)
        stacks.append(api)
        return await api.__aenter__()

    yield make
    for api in stacks:
        await api.__aexit__(None, None, None)


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def mem(content: str, **kw) -> dict:
    return {"kind": "memory", "content": content, **kw}


FACT = {"kind": "fact", "category": "profile", "key": "city", "value": "Leeds"}


async def counts(services) -> tuple[int, int, int]:
    async with services.memories.writer.pool.connection() as conn:
        out = []
        for table in ("memory_items", "facts", "memory_history"):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
            out.append((await cur.fetchone())["n"])
    return tuple(out)


async def post(c, body: str, user: str = "ann"):
    return await c.post("/v1/import", params={"user_id": user}, content=body)


@pytest.mark.parametrize(
    ("bad", "line", "says"),
    [
        (mem("ok", confidence=7), 3, "confidence"),  # was a 500
        (mem("ok", status="deleted"), 3, "status"),
        ({**FACT, "value": "Le\x00eds"}, None, "value"),  # a NUL in a fact: was a 500
        (mem("ok", scope="org"), 3, "only user and session"),
        (mem("ok", created_at="yesterday"), 3, "created_at"),
        ({"kind": "history", "memory_id": "m1", "event": "EXPLODE"}, 3, "event"),
    ],
)
async def test_a_bad_line_in_the_middle_writes_nothing(make_stack, bad, line, says):
    c, services = await make_stack()
    body = jsonl(mem("first fine memory"), FACT, bad, mem("last fine memory"))
    r = await post(c, body)
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    # (a NUL anywhere may be refused by the API's input guard first, without a line)
    assert (line is None or message.startswith(f"line {line}:")) and says in message
    assert await counts(services) == (0, 0, 0)


async def test_a_quota_refusal_rolls_back_memories_and_facts(make_stack):
    c, services = await make_stack(quota={"max_memories_per_user": 2})
    r = await post(c, jsonl(FACT, mem("one"), mem("two"), mem("three")))
    assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded", r.text
    assert await counts(services) == (0, 0, 0)  # the fact was not kept either
    c2, services2 = c, services
    r = await post(c2, jsonl(FACT, mem("one"), mem("two")))
    assert r.status_code == 200, r.text
    assert (await counts(services2))[:2] == (2, 1)


async def test_a_fact_quota_refusal_rolls_back_the_memories(make_stack):
    c, services = await make_stack(quota={"max_facts_per_user": 1})
    other = {**FACT, "key": "country", "value": "UK"}
    r = await post(c, jsonl(mem("one"), FACT, other))
    assert r.status_code == 403 and "fact quota" in r.json()["error"]["message"], r.text
    assert await counts(services) == (0, 0, 0)


async def test_scope_expiry_status_timestamps_and_history_are_kept(make_stack):
    c, _ = await make_stack()
    body = jsonl(
        mem(
            "a session note",
            id="m1",
            scope="session",
            session_id="s1",
            expires_at=None,
            status="archived",
            created_at="2024-03-01T10:00:00+00:00",
            updated_at="2024-03-02T10:00:00+00:00",
            confidence=0.7,
        ),
        {
            "kind": "history",
            "memory_id": "m1",
            "event": "ADD",
            "new_content": "a session nte",
            "actor": "api:abc",
            "created_at": "2024-03-01T10:00:00+00:00",
        },
        {
            "kind": "history",
            "memory_id": "m1",
            "event": "UPDATE",
            "old_content": "a session nte",
            "new_content": "a session note",
            "actor": "api:abc",
            "created_at": "2024-03-02T10:00:00+00:00",
            "new_data": {"decision": "UPDATE", "reason": "typo", "turns": [3]},
        },
        {"kind": "history", "memory_id": "gone", "event": "DELETE", "actor": "api:abc"},
        {"memory": "ran at the gym", "run_id": "r9", "created_at": "2024-05-05T08:00:00Z"},
    )
    r = await post(c, body, user="bea")
    assert r.status_code == 200, r.text
    assert r.json()["imported"]["history"] == 2  # the deleted memory's event is dropped
    rows = (await c.get("/v1/memories", params={"user_id": "bea"})).json()["memories"]
    by = {m["content"]: m for m in rows}
    note, gym = by["a session note"], by["ran at the gym"]
    assert (note["scope"], note["session_id"], note["expires_at"]) == ("session", "s1", None)
    assert note["status"] == "archived" and note["confidence"] == pytest.approx(0.7)
    assert note["created_at"].startswith("2024-03-01") and note["updated_at"].startswith(
        "2024-03-02"
    )
    # a mem0 run id is a session, not a 24 h expiry
    assert (gym["scope"], gym["session_id"], gym["expires_at"]) == ("session", "r9", None)
    assert gym["created_at"].startswith("2024-05-05")
    events = (await c.get(f"/v1/memories/{note['id']}/history", params={"user_id": "bea"})).json()
    events = events.get("events", events) if isinstance(events, dict) else events
    assert [(e["event"], e["new_content"]) for e in events] == [
        ("ADD", "a session nte"),
        ("UPDATE", "a session note"),
    ]
    assert events[1]["new_data"] == {"decision": "UPDATE", "reason": "typo", "turns": [3]}


async def test_fact_versions_keep_their_chain(make_stack):
    c, _ = await make_stack()
    body = jsonl(
        {
            **FACT,
            "id": "f1",
            "value": "York",
            "active": False,
            "superseded_by": "f2",
            "created_at": "2023-01-01T00:00:00+00:00",
            "superseded_at": "2024-01-01T00:00:00+00:00",
        },
        {**FACT, "id": "f2", "created_at": "2024-01-01T00:00:00+00:00", "source": "user"},
    )
    r = await post(c, body, user="cy")
    assert r.status_code == 200, r.text
    assert r.json()["imported"]["fact_versions"] == 1
    facts = await c.get("/v1/facts", params={"user_id": "cy", "include_inactive": "true"})
    old, new = facts.json()["facts"]
    assert (old["value"], old["active"], new["value"], new["active"]) == (
        "York",
        False,
        "Leeds",
        True,
    )
    assert old["superseded_by"] == new["id"] and new["source"] == "user"
    assert new["created_at"].startswith("2024-01-01")


async def test_records_are_bounded_charged_one_unit_each_and_parsed_off_the_loop(
    make_stack, monkeypatch
):
    c, services = await make_stack(limits={"import_records": 3})
    r = await post(c, jsonl(*(mem(f"m{i}") for i in range(4))))
    assert r.status_code == 413 and "at most 3" in r.json()["error"]["message"]
    charged, threads = [], []
    charge = services.auth.charge

    def spy(caller, user, units, *rest):
        charged.append(units)
        return charge(caller, user, units, *rest)

    parse = portability_route.parse

    def parse_spy(*args):
        threads.append(threading.current_thread())
        return parse(*args)

    monkeypatch.setattr(services.auth, "charge", spy)
    monkeypatch.setattr(portability_route, "parse", parse_spy)
    header = {"kind": "header", "format": "memserve-export", "version": 1}
    r = await post(c, jsonl(header, mem("a" * 4000), mem("b" * 4000), FACT))
    assert r.status_code == 200, r.text
    assert charged == [1.0, 3]  # the route's unit, then one per record (not per KiB)
    assert threads and threads[0] is not threading.main_thread()


async def test_fact_quota_on_the_api_is_a_clear_403(make_stack):
    c, services = await make_stack(quota={"max_facts_per_user": 1})
    put = {"user_id": "dan", "category": "profile", "key": "city", "value": "Leeds"}
    assert (await c.put("/v1/facts", json=put)).status_code == 200
    assert (await c.put("/v1/facts", json={**put, "value": "York"})).status_code == 200
    r = await c.put("/v1/facts", json={**put, "key": "country", "value": "UK"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded"
    assert "user fact quota (1)" in r.json()["error"]["message"]


async def test_writes_during_a_running_forget_are_409_and_retryable(make_stack):
    c, services = await make_stack()
    pool = services.memories.writer.pool
    async with pool.connection() as conn:
        running = await Erasure.start(conn, "default", "eve", lease_s=60)
    for r in (
        await c.post("/v1/memories", json={"user_id": "eve", "content": "hello"}),
        await c.put(
            "/v1/facts", json={"user_id": "eve", "category": "a", "key": "b", "value": "c"}
        ),
        await post(c, jsonl(mem("imported"), FACT), user="eve"),
    ):
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "forget_in_progress" and r.headers["retry-after"]
    assert await counts(services) == (0, 0, 0)
    async with pool.connection() as conn:
        await running.finish(conn)
    r = await c.post("/v1/memories", json={"user_id": "eve", "content": "hello"})
    assert r.status_code == 201, r.text


async def test_validity_and_the_supersession_chain_are_kept(make_stack):
    c, _ = await make_stack()
    body = jsonl(
        mem(
            "lives in Paris",
            id="m1",
            valid_from="2020-01-01T00:00:00+00:00",
            valid_until="2024-06-01T00:00:00+00:00",
            superseded_by="m2",
        ),
        mem(
            "lives in Berlin",
            id="m2",
            valid_from="2024-06-01T00:00:00+00:00",
            supersedes=["m1", "not-imported"],
        ),
    )
    r = await post(c, body, user="fay")
    assert r.status_code == 200, r.text
    rows = await c.get("/v1/memories", params={"user_id": "fay", "include_invalidated": "true"})
    by = {m["content"]: m for m in rows.json()["memories"]}
    paris, berlin = by["lives in Paris"], by["lives in Berlin"]
    assert paris["valid_until"].startswith("2024-06-01") and paris["superseded_by"] == berlin["id"]
    assert berlin["supersedes"] == [paris["id"]] and berlin["valid_from"].startswith("2024-06-01")
    current = (await c.get("/v1/memories", params={"user_id": "fay"})).json()["memories"]
    assert [m["content"] for m in current] == ["lives in Berlin"]  # the retired one is hidden


@pytest.mark.parametrize(
    ("records", "says"),
    [
        # two replaced versions with one id: a primary key violation (was a 500)
        (
            [
                {**FACT, "id": "f1", "value": "York", "active": False},
                {**FACT, "id": "f1", "value": "Hull", "active": False},
                {**FACT, "id": "f2"},
            ],
            "line 3: fact id 'f1' repeats the id of line 2",
        ),
        # the active fact and a replaced version with one id (was a 500 too)
        (
            [{**FACT, "id": "f1"}, {**FACT, "id": "f1", "value": "York", "active": False}],
            "line 3: fact id 'f1' repeats the id of line 2",
        ),
        ([mem("one", id="m1"), mem("two", id="m1")], "line 3: memory id 'm1' repeats"),
    ],
)
async def test_two_records_with_one_id_are_a_422_that_writes_nothing(make_stack, records, says):
    c, services = await make_stack()
    r = await post(c, jsonl(mem("a fine memory first"), *records))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith(says), r.text
    assert await counts(services) == (0, 0, 0)


async def test_a_delete_between_a_fact_put_and_its_read_back_is_not_a_500(make_stack):
    """PUT /v1/facts wrote, then read the value back apart: a DELETE landing in between
    made the read None and an assert a 500. Both now run in one transaction."""
    c, services = await make_stack()
    store = services.facts.store
    read_back = store.get
    deletes: list[asyncio.Task] = []

    async def get_after_a_delete(owner, category, key, **how):
        deletes.append(asyncio.create_task(services.facts.delete(owner, category, key)))
        await asyncio.wait(deletes, timeout=1.0)  # it cannot see an uncommitted write
        return await read_back(owner, category, key, **how)

    store.get = get_after_a_delete  # this replica's store object only
    try:
        body = {"user_id": "dan", "category": "profile", "key": "city", "value": "Leeds"}
        r = await c.put("/v1/facts", json=body)
        assert r.status_code == 200, r.text
        assert (r.json()["key"], r.json()["value"]) == ("city", "Leeds")
    finally:
        store.get = read_back
        await asyncio.gather(*deletes)
    left = (await c.get("/v1/facts", params={"user_id": "dan"})).json()["facts"]
    assert left in ([], [r.json()])  # the delete ran after the PUT, or saw nothing


async def test_an_import_a_forget_runs_during_does_not_survive_it(make_stack):
    """The import's writes passed the erasure guard, then a forget of the user ran before
    the import committed: the forget could not see the rows, and they survived it. The
    import now checks the guard again before its commit (409, nothing written)."""
    c, services = await make_stack()
    writer, pool = services.portability.writer, services.memories.writer.pool
    add, forgets = writer.add, []

    async def lock_waiters() -> int:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM pg_locks WHERE NOT granted")
            return (await cur.fetchone())["n"]

    async def add_then_forget(owner, items, vectors, **how):
        rows = await add(owner, items, vectors, **how)
        forgets.append(asyncio.create_task(services.lifecycle.forget.forget(owner)))
        while not forgets[0].done() and not await lock_waiters():  # done, or waits on us
            await asyncio.sleep(0.01)
        return rows

    writer.add = add_then_forget  # this stack's writer only
    try:
        r = await post(c, jsonl(mem("imported while being forgotten")), user="ivy")
    finally:
        writer.add = add
        await asyncio.gather(*forgets)
    assert forgets, "the import never wrote"
    assert r.status_code == 409 and r.json()["error"]["code"] == "forget_in_progress", r.text
    assert await counts(services) == (0, 0, 0)


async def test_an_imports_memories_are_embedded_in_the_bulk_lane(fresh_db, encoder):
    """Issue 33: an import is bulk work: its embeddings go after interactive callers."""
    settings = Settings(database_url=fresh_db, bootstrap_key=KEY)
    boot = bootstrap(settings, fresh_db)
    bulk: list[list[str]] = []
    async with in_process_api(settings, boot.model, fresh_db, encoder, KEY, bulk_calls=bulk) as (
        c,
        _,
    ):
        r = await post(c, jsonl(mem("imported one"), mem("imported two")))
        assert r.status_code == 200, r.text
        r = await c.post("/v1/memories", json={"user_id": "ann", "content": "a live write"})
        assert r.status_code in (200, 201), r.text
    in_bulk = [t for call in bulk for t in call]
    assert {"imported one", "imported two"} <= set(in_bulk)
    assert "a live write" not in in_bulk
