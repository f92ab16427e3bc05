"""Time words of queries and memories: read in linear time whatever the text."""

from __future__ import annotations

import pytest

from serve_app.retrieval.temporal import mentions_time, referenced_day, time_intent


def test_periods_and_relative_days_are_read():
    intent = time_intent("When did I go to Rome in May, 2023?")
    assert intent.when and intent.period is not None
    assert time_intent("anything during 2021").period is not None
    assert time_intent("in may").period is None  # a month without a year: ambiguous
    assert referenced_day("We moved two weeks ago", 100.0) == 86.0
    assert referenced_day("LAST YEAR we went", 1000.0) == 635.0
    assert mentions_time("see you tomorrow") and not mentions_time("see you")


@pytest.mark.timeout(10)  # backtracking: ~15 s at 8000 spaces, hours at this size
def test_a_month_then_a_long_run_of_spaces_costs_linear_work():
    """``\\s*,?\\s*`` after a month split a run of spaces every way before failing:
    "in may" + 8000 spaces took 15 s on every search."""
    assert time_intent("in may" + " " * 200_000).period is None
    assert time_intent("in may" + " " * 200_000 + "2023").period is not None
