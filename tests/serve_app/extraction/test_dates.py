"""Time in extraction (real database, real encoder, scripted LLM): the prompt shows when
each turn was said, and what extraction stores gets that event time (``valid_from``)."""

from __future__ import annotations

from datetime import UTC, datetime

from serve_app.extraction.prompts import EXTRACT_SYSTEM
from serve_app.store.turns import SessionKey
from tests.fakes.llm_server import extraction, fact, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

MON = datetime(2026, 11, 16, 9, 30, tzinfo=UTC)
THU = datetime(2026, 11, 19, 18, 0, tzinfo=UTC)


async def test_prompt_shows_turn_dates_and_memories_get_them(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = SessionKey("t1", "alice", "s1")
    fake_llm.enqueue(
        extraction(
            [
                memory("The user met Ana on 2026-11-17", "episodic"),
                {**memory("The user moved to Berlin", "fact"), "valid_from": "2026-03-01"},
                {**memory("The user runs", "fact"), "valid_from": "last spring"},  # dropped
            ],
            [fact("identity", "city", "Berlin")],
        )
    )
    await h.turns.append(
        k,
        [("user", "Hello there"), ("user", "I met Ana last Tuesday; I moved to Berlin in March")],
        agent_id=None,
        ttl_hours=1.0,
        occurred_at=[MON, THU],
    )
    out = await h.pipeline.process_session(k, force=True)
    assert out.error is None and out.saved == 3
    [call] = fake_llm.calls("extract")
    system, user = call["messages"][0]["content"], call["messages"][-1]["content"]
    assert system.startswith(EXTRACT_SYSTEM.split("\n")[0]) and "relative date" in system
    assert "Session date: Thu 2026-11-19" in user
    assert "[1] (Mon 2026-11-16) user: Hello there" in user
    assert "[2] (Thu 2026-11-19) user: I met Ana last Tuesday" in user
    when = {m["content"]: m["valid_from"] for m in await h.memories("alice")}
    assert when["The user met Ana on 2026-11-17"] == THU  # the source turn's date
    assert when["The user moved to Berlin"] == datetime(2026, 3, 1, tzinfo=UTC)  # the model's
    assert when["The user runs"] == THU  # an unparseable date falls back to the turn's
    [city] = await h.rows("SELECT * FROM facts WHERE user_id = %s", "alice")
    assert city["valid_from"] == THU


async def test_turns_without_a_client_time_are_dated_by_the_server(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = SessionKey("t1", "bob", "s1")
    fake_llm.enqueue(extraction([memory("The user likes tea")]))
    before = datetime.now(UTC)
    await h.say(k, ("user", "I like tea"))
    await h.pipeline.process_session(k, force=True)
    [call] = fake_llm.calls("extract")
    today = before.strftime("%a %Y-%m-%d")
    assert f"Session date: {today}" in call["messages"][-1]["content"]
    [m] = await h.memories("bob")
    assert m["valid_from"] >= before.replace(microsecond=0) and m["valid_from"] <= datetime.now(UTC)
