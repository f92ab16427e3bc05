"""Reconcile on write: the prompt shows the owner's live memories under aliases and the
model's ADD / UPDATE / INVALIDATE / NOOP decisions are applied with version checks
(real database, real encoder, the scripted LLM deciding from what it is shown)."""

from __future__ import annotations

import asyncio
import json
import uuid

from serve_app.extraction.reconcile import KNOWN_HEADER, Known, Shown
from serve_app.extraction.turn import Turn
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.records import Owner
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import decision, extraction, memory, shown
from tests.serve_app.extraction.conftest import test_settings as settings_for

T = "t1"
PARIS = "The user lives in Paris"
BERLIN = "The user lives in Berlin"


def key(user: str, session: str) -> SessionKey:
    return SessionKey(T, user, session)


async def seed(h, fake_llm, user: str, *contents: str) -> list[dict]:
    """The user's first memories, extracted from a first session (nothing known yet)."""
    fake_llm.enqueue(extraction([memory(c) for c in contents]))
    k = key(user, "s0")
    await h.say(k, ("user", "Let me tell you about myself."), ("assistant", "Sure."))
    out = await h.pipeline.process_session(k)
    assert out.saved == len(contents), out
    return await h.memories(user)


def alias_of(messages: list[dict], text: str) -> str:
    [alias] = [a for a, t in shown(messages).items() if t == text]
    return alias


def decide(fake_llm, make) -> None:
    """Answer extraction calls that list known memories with ``make(aliases, messages)``."""

    def respond(kind: str, messages: list[dict]) -> str | None:
        if kind != "extract" or not shown(messages):
            return None
        return extraction(make(messages))

    fake_llm.add_responder(respond)


def while_the_model_thinks(fake_llm, work) -> None:
    """Run ``work()`` on the test's loop while the LLM answers a reconcile prompt (between
    the gather and the apply of the batch)."""
    loop = asyncio.get_running_loop()

    def on_request(kind: str, messages: list[dict]) -> None:
        if kind == "extract" and shown(messages):
            asyncio.run_coroutine_threadsafe(work(), loop).result(30)

    fake_llm.on_request = on_request


async def history(h, memory_id) -> list[dict]:
    return await h.rows(
        "SELECT event, old_content, new_content, new_data FROM memory_history"
        " WHERE memory_id = %s ORDER BY id",
        memory_id,
    )


async def test_update_retires_the_old_memory_and_links_the_new_one(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    [paris] = await seed(h, fake_llm, "ann", PARIS)
    decide(
        fake_llm,
        lambda msgs: [
            decision("UPDATE", alias_of(msgs, PARIS), BERLIN, "moved to Berlin", turns=[1])
        ],
    )
    k = key("ann", "s1")
    await h.say(k, ("user", "Big news: I moved to Berlin last month!"), ("assistant", "Wow."))
    out = await h.pipeline.process_session(k)

    prompt = fake_llm.calls("extract")[-1]["messages"]
    assert KNOWN_HEADER in prompt[-1]["content"] and str(paris["id"]) not in prompt[-1]["content"]
    assert "UPDATE" in prompt[0]["content"]  # the rules are in the system prompt
    rows = {r["content"]: r for r in await h.memories("ann")}
    old, new = rows[PARIS], rows[BERLIN]
    assert old["valid_until"] is not None and old["superseded_by"] == new["id"]  # kept
    assert new["supersedes"] == [old["id"]] and new["valid_until"] is None
    assert out.events == [
        {
            "id": str(new["id"]),
            "memory": BERLIN,
            "event": "UPDATE",
            "previous_memory": PARIS,
            "previous_id": str(old["id"]),
        }
    ]
    [added] = await history(h, new["id"])
    assert added["event"] == "ADD"
    why = {"decision": "UPDATE", "reason": "moved to Berlin", "turns": [1], "alias": "m1"}
    assert added["new_data"] == {**why, "supersedes": str(old["id"])}
    retired = (await history(h, old["id"]))[-1]
    assert retired["event"] == "INVALIDATE"
    assert retired["new_data"]["reason"] == "moved to Berlin"
    assert retired["new_data"]["superseded_by"] == str(new["id"])
    # only the current value is valid now (what search, context and dedup see)
    live = await h.rows(
        "SELECT content FROM memory_items WHERE user_id = 'ann' AND valid_until IS NULL"
    )
    assert [r["content"] for r in live] == [BERLIN]


async def test_invalidate_sets_valid_until_and_never_deletes(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    trip = "The user plans a trip to Rome in May"
    [row] = await seed(h, fake_llm, "bo", trip)
    decide(
        fake_llm,
        lambda msgs: [
            decision("INVALIDATE", alias_of(msgs, trip), reason="trip cancelled", turns=[1, 2])
        ],
    )
    k = key("bo", "s1")
    await h.say(k, ("user", "We cancelled the Rome trip."), ("assistant", "Sorry to hear."))
    out = await h.pipeline.process_session(k)
    [after] = await h.memories("bo")
    assert after["id"] == row["id"] and after["content"] == trip  # not deleted
    assert after["valid_until"] is not None and after["version"] == row["version"] + 1
    assert out.events == [{"id": str(row["id"]), "memory": trip, "event": "DELETE"}]
    last = (await history(h, row["id"]))[-1]
    assert last["event"] == "INVALIDATE"
    assert last["new_data"] == {
        "decision": "INVALIDATE",
        "reason": "trip cancelled",
        "turns": [1, 2],
        "alias": "m1",
    }
    assert h.pipeline.metrics.counts["reconcile_invalidated"] == 1


async def test_noop_writes_nothing_and_add_is_annotated(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    [row] = await seed(h, fake_llm, "cy", PARIS)
    decide(
        fake_llm,
        lambda msgs: [
            decision("NOOP", alias_of(msgs, PARIS)),
            {
                **memory("The user has a cat named Tom"),
                "event": "ADD",
                "reason": "new pet",
                "turns": [1],
            },
        ],
    )
    k = key("cy", "s1")
    await h.say(k, ("user", "Still in Paris, and we got a cat, Tom."), ("assistant", "Nice."))
    out = await h.pipeline.process_session(k)
    rows = {r["content"]: r for r in await h.memories("cy")}
    assert rows[PARIS]["version"] == row["version"] and rows[PARIS]["valid_until"] is None
    cat = rows["The user has a cat named Tom"]
    assert [e["event"] for e in out.events] == ["NONE", "ADD"]
    assert out.events[0] == {"id": str(row["id"]), "memory": PARIS, "event": "NONE"}
    assert (await history(h, cat["id"]))[0]["new_data"] == {
        "decision": "ADD",
        "reason": "new pet",
        "turns": [1],
    }
    assert len(await history(h, row["id"])) == 1  # NOOP: no event on the known memory


async def test_invented_and_foreign_targets_are_ignored_and_counted(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    [bobs] = await seed(h, fake_llm, "bob", "The user's locker code is 4711")
    [mine] = await seed(h, fake_llm, "dee", PARIS)
    decide(
        fake_llm,
        lambda msgs: [
            decision("INVALIDATE", "m42", reason="invented"),
            decision("INVALIDATE", str(bobs["id"]), reason="a database id of another user"),
            decision("UPDATE", "m77", BERLIN, "invented alias"),  # becomes a plain ADD
        ],
    )
    k = key("dee", "s1")
    await h.say(k, ("user", "I moved to Berlin."), ("assistant", "OK."))
    out = await h.pipeline.process_session(k)
    assert out.error is None
    [bob_after] = await h.memories("bob")
    assert bob_after["valid_until"] is None and bob_after["version"] == bobs["version"]
    rows = {r["content"]: r for r in await h.memories("dee")}
    assert rows[PARIS]["valid_until"] is None and rows[PARIS]["version"] == mine["version"]
    assert rows[BERLIN]["supersedes"] == []
    assert h.pipeline.metrics.counts["reconcile_rejected_unknown"] == 3
    assert [e["event"] for e in out.events] == ["ADD"]


def test_an_alias_that_resolves_to_another_owner_is_foreign():
    owner = Owner(T, "eve")
    known = Known(owner, {"m1": Shown("m1", "memory", uuid.uuid4(), "x", 1, "mallory")})
    assert known.resolve("m1") == (None, "foreign")
    assert known.resolve("M1 ") == (None, "foreign")  # aliases are matched loosely
    assert known.resolve("m2") == (None, "unknown")


async def test_a_memory_edited_meanwhile_is_never_overwritten(make_harness, fake_llm):
    """A PATCH lands while the model thinks: the UPDATE must not retire the edited row
    (its content is added as new) and the INVALIDATE must not retire it either."""
    h = await make_harness(settings_for(fake_llm.url))
    job = "The user works at Acme"
    await seed(h, fake_llm, "fay", PARIS, job)
    edited = "The user lives in Paris (edited by the user)"

    async def patch() -> None:  # what PATCH /v1/memories/{id} does: the guarded update
        for row in await h.memories("fay"):
            await h.pipeline.guarded.update(
                Owner(T, "fay"),
                row["id"],
                {"content": edited},
                None,
                actor="api",
                expected_version=row["version"],
            )

    while_the_model_thinks(fake_llm, patch)
    decide(
        fake_llm,
        lambda msgs: [
            decision("UPDATE", alias_of(msgs, PARIS), BERLIN, "moved"),
            decision("INVALIDATE", alias_of(msgs, job), reason="quit"),
        ],
    )
    k = key("fay", "s1")
    await h.say(k, ("user", "I moved to Berlin and quit Acme."), ("assistant", "OK."))
    out = await h.pipeline.process_session(k)
    assert out.error is None
    rows = await h.memories("fay")
    assert all(r["valid_until"] is None for r in rows)  # nothing retired blindly
    assert sorted(r["content"] for r in rows) == sorted([edited, edited, BERLIN])
    assert h.pipeline.metrics.counts["reconcile_conflict"] == 2
    assert [e["event"] for e in out.events] == ["ADD"]


async def test_a_forget_racing_the_reconcile_writes_nothing(make_harness, fake_llm, encoder):
    h = await make_harness(settings_for(fake_llm.url))
    await seed(h, fake_llm, "gus", PARIS, "The user plans a trip to Rome")
    forgets = ForgetStore(h.pool, encoder.spec.table_slug)
    last_event: list[int] = []

    async def forget() -> None:
        await forgets.forget(Scope(T, "gus"))
        last_event.extend(r["n"] for r in await h.rows("SELECT max(id) AS n FROM memory_history"))

    while_the_model_thinks(fake_llm, forget)
    decide(
        fake_llm,
        lambda msgs: [
            decision("UPDATE", alias_of(msgs, PARIS), BERLIN, "moved"),
            decision("INVALIDATE", "m2", reason="cancelled"),
            memory("The user speaks German"),
        ],
    )
    k = key("gus", "s1")
    await h.say(k, ("user", "Moved to Berlin, no Rome, learning German."), ("assistant", "OK"))
    out = await h.pipeline.process_session(k)
    assert out.error is None and last_event  # the forget ran while the model thought
    assert await h.memories("gus") == []
    assert await h.rows("SELECT * FROM memory_history WHERE id > %s", last_event[0]) == []
    assert await h.rows("SELECT * FROM facts WHERE user_id = 'gus'") == []


async def test_without_known_memories_the_prompt_is_todays(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = key("hal", "s0")
    await h.say(k, ("user", "Hello there"), ("assistant", "Hi"))
    await h.pipeline.process_session(k)
    [call] = fake_llm.calls("extract")
    assert KNOWN_HEADER not in json.dumps(call["messages"])
    assert "INVALIDATE" not in call["messages"][0]["content"]


async def test_a_users_own_document_chunk_is_never_a_known_memory(make_harness, fake_llm):
    """Reconcile shows the LLM the user's memories it may update or retire; a chunk of the
    user's own document is knowledge, not one of them (the lexical side found it)."""
    h = await make_harness(settings_for(fake_llm.url))
    [paris] = await seed(h, fake_llm, "ann", PARIS)
    turns = [Turn("user", "Big news: I moved away from Paris to Berlin last month!")]
    owner = Owner(T, "ann")
    assert await h.pipeline.reconciler.known(owner, turns)  # a memory: shown
    await h.rows(
        "UPDATE memory_items SET type = 'document_chunk' WHERE id = %s RETURNING id", paris["id"]
    )
    assert not await h.pipeline.reconciler.known(owner, turns)  # a chunk: never shown
