"""Time words of queries and memories: read in linear time whatever the text."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from serve_app.retrieval.temporal import mentions_time, referenced_day, time_intent


def day(d: date) -> float:
    return float((d - date(1970, 1, 1)).days)


def test_periods_and_relative_days_are_read():
    intent = time_intent("When did I go to Rome in May, 2023?")
    assert intent.when and intent.period == (day(date(2023, 5, 1)), day(date(2023, 5, 31)))
    assert time_intent("anything during 2021").period == (
        day(date(2021, 1, 1)),
        day(date(2021, 12, 31)),
    )
    # Said 1970-04-11 (a Saturday): "two weeks ago" is the week of 1970-03-23, whose
    # middle is the 26th; "last year" is 1969, whose middle is July 2nd.
    assert referenced_day("We moved two weeks ago", 100.0) == day(date(1970, 3, 26))
    assert referenced_day("LAST YEAR we went", day(date(1972, 9, 27))) == day(date(1971, 7, 2))
    assert referenced_day("We went hiking", 100.0) == 100.0
    assert mentions_time("see you tomorrow") and not mentions_time("see you")


def test_relative_periods_of_a_question_are_read_against_its_reference_day():
    asked = date(2023, 6, 14)  # a Wednesday
    assert time_intent("What did I cook last week?", asked).period == (
        day(date(2023, 6, 5)),
        day(date(2023, 6, 11)),
    )
    assert time_intent("in may", asked).period == (day(date(2023, 5, 1)), day(date(2023, 5, 31)))
    assert time_intent("two months ago", asked).period == (
        day(date(2023, 4, 1)),
        day(date(2023, 4, 30)),
    )
    # No reference: today's date.
    today = datetime.now(UTC).date()
    assert time_intent("what did I do yesterday").period == (
        day(today) - 1,
        day(today) - 1,
    )


@pytest.mark.timeout(10)  # backtracking: ~15 s at 8000 spaces, hours at this size
def test_a_month_then_a_long_run_of_spaces_costs_linear_work():
    """``\\s*,?\\s*`` after a month split a run of spaces every way before failing:
    "in may" + 8000 spaces took 15 s on every search."""
    asked = date(2026, 11, 28)
    assert time_intent("in may" + " " * 200_000, asked).period == (
        day(date(2026, 5, 1)),
        day(date(2026, 5, 31)),
    )
    assert time_intent(" " * 200_000 + "in may 2023", asked).period is None  # past the scan
