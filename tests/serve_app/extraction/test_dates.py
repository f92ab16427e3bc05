"""Time in extraction (real database, real encoder, scripted LLM): the prompt shows when
each turn was said, and what extraction stores gets that event time (``valid_from``);
the dates models write, in their common forms, parse (serve_app/extraction/dates.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from serve_app.extraction.dates import parse_when
from serve_app.extraction.prompts import EXTRACT_SYSTEM
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
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


# ---------------------------------------------------------------- parsing (dates.py)

APR2 = datetime(2026, 4, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "2026-04-02",
        "Thu 2026-04-02",  # the prompt's own form, echoed back by real models
        "Thursday 2026-04-02",
        "Thu, 2026-04-02",
        "Thursday, April 2, 2026",
        "April 2, 2026",
        "Apr 2nd 2026",
        "2 Apr 2026",
        "2nd of April, 2026",
        "Thu, 2 Apr 2026 10:00:00 GMT",  # a time after a written date: the day
        "04/02/2026",  # A/B/YYYY: month/day (US order) ...
        "02.04.2026",  # ... dots: day.month
        "2026/04/02",
        "Fri 2026-04-02",  # a weekday that disagrees: the date wins
    ],
)
def test_common_forms_parse_to_the_day(text):
    assert parse_when(text) == APR2


def test_iso_with_time_keeps_the_time_and_zone():
    assert parse_when("2026-04-02T10:30:00Z") == APR2.replace(hour=10, minute=30)
    assert parse_when("Thu 2026-04-02T10:30:00Z") == APR2.replace(hour=10, minute=30)
    assert parse_when("2026-04-02 10:30") == APR2.replace(hour=10, minute=30)
    plus2 = parse_when("2026-04-02T10:30:00+02:00")
    assert plus2 == APR2.replace(hour=8, minute=30) and plus2.utcoffset().seconds == 7200


def test_partial_dates_take_the_first_day():
    assert parse_when("March 2024") == datetime(2024, 3, 1, tzinfo=UTC)
    assert parse_when("2024-03") == datetime(2024, 3, 1, tzinfo=UTC)
    assert parse_when("2024") == datetime(2024, 1, 1, tzinfo=UTC)
    assert parse_when("13/02/2026") == datetime(2026, 2, 13, tzinfo=UTC)  # 13 is no month


@pytest.mark.parametrize(
    "text",
    [
        "",
        "last spring",
        "yesterday",
        "Thu",
        "2026-02-30",
        "31/31/2026",
        "1850-01-01",
        "3026-01-01",
        "April 2",
        "12-15",
        "Thu 2026-04-02 " + "x" * 80,
        None,
        20260402,
    ],
)
def test_what_is_not_a_date_is_none(text):
    assert parse_when(text) is None


def test_parsing_is_linear_on_long_hostile_input():
    assert parse_when("1" * 10_000) is None and parse_when("Thu " * 5000) is None


async def test_a_weekday_date_from_the_model_dates_the_memory(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = SessionKey("t1", "carol", "s1")
    dated = {
        **memory("The user started a pottery class", "episodic"),
        "valid_from": "Thu 2026-04-02",
    }
    fake_llm.enqueue(
        extraction(
            [dated], [{**fact("identity", "city", "Lyon"), "valid_from": "Thursday, April 2, 2026"}]
        )
    )
    await h.turns.append(
        k,
        [("user", "I started pottery on Thursday; I live in Lyon")],
        agent_id=None,
        ttl_hours=1.0,
        occurred_at=[THU],
    )
    out = await h.pipeline.process_session(k, force=True)
    assert out.error is None and out.saved == 1
    [m] = await h.memories("carol")
    assert m["valid_from"] == APR2
    [city] = await h.rows("SELECT * FROM facts WHERE user_id = %s", "carol")
    assert city["valid_from"] == APR2
