"""Periods said relative to a reference day (serve_app/retrieval/periods.py): the
documented conventions as properties over any reference day, and any text."""

from __future__ import annotations

import calendar
from datetime import date, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.retrieval.periods import MAX_CHARS, Period, resolve, words

REFS = st.dates(min_value=date(1990, 1, 1), max_value=date(2090, 12, 31))
WEEKDAYS = [d.lower() for d in calendar.day_name]
COUNTS = st.integers(min_value=1, max_value=40)


def monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


@given(REFS)
def test_yesterday_today_tomorrow(ref):
    assert resolve("what did I eat yesterday?", ref) == Period(
        ref - timedelta(1), ref - timedelta(1)
    )
    assert resolve("Today I start", ref) == Period(ref, ref)
    assert resolve("see you tomorrow", ref).first == ref + timedelta(days=1)
    assert resolve("the day before yesterday", ref).first == ref - timedelta(days=2)
    assert resolve("the day after tomorrow", ref).first == ref + timedelta(days=2)


@given(REFS)
def test_weeks_run_monday_to_sunday(ref):
    this = resolve("this week", ref)
    assert this.first == monday(ref) and this.last == monday(ref) + timedelta(days=6)
    last = resolve("what did we plan last week", ref)
    assert last.first == this.first - timedelta(days=7) and last.last < this.first
    nxt = resolve("next week", ref)
    assert nxt.first == this.first + timedelta(days=7)
    assert resolve("the week after next", ref).first == this.first + timedelta(days=14)


@given(REFS)
def test_weekends_are_saturday_and_sunday_of_their_week(ref):
    for phrase, shift in (("last weekend", -1), ("this weekend", 0), ("next weekend", 1)):
        p = resolve(phrase, ref)
        assert p.first.weekday() == 5 and p.last.weekday() == 6
        assert monday(p.first) == monday(ref) + timedelta(weeks=shift)
    assert resolve("last weekend", ref).last < ref


@given(REFS, st.sampled_from(WEEKDAYS))
def test_weekdays(ref, name):
    bare = resolve(f"what did I cook on {name}?", ref).first
    assert bare.strftime("%A").lower() == name and 0 <= (ref - bare).days <= 6
    last = resolve(f"last {name}", ref).first
    assert last.strftime("%A").lower() == name and 1 <= (ref - last).days <= 7
    nxt = resolve(f"next {name}", ref).first
    assert nxt.strftime("%A").lower() == name and 1 <= (nxt - ref).days <= 7
    assert resolve(f"this coming {name}", ref).first == nxt
    after = resolve(f"we fly out the {name.title()} after next", ref).first
    assert after == nxt + timedelta(days=7) and 8 <= (after - ref).days <= 14
    this = resolve(f"this {name}", ref).first
    assert monday(this) == monday(ref) and this.strftime("%A").lower() == name


@given(REFS, COUNTS)
def test_counts_ago_and_ahead(ref, n):
    assert resolve(f"{n} days ago", ref).first == ref - timedelta(days=n)
    weeks = resolve(f"{n} weeks ago", ref)
    assert weeks.first == monday(ref) - timedelta(weeks=n)
    months = resolve(f"{n} months ago", ref)
    total = ref.year * 12 + ref.month - 1 - n
    assert (months.first.year, months.first.month) == (total // 12, total % 12 + 1)
    assert months.first.day == 1 and (months.last + timedelta(days=1)).day == 1
    assert resolve(f"{n} years ago", ref) == Period(
        date(ref.year - n, 1, 1), date(ref.year - n, 12, 31)
    )
    assert resolve(f"in {n} days", ref).first == ref + timedelta(days=n)


@given(REFS, st.integers(min_value=2, max_value=40), st.sampled_from(["days", "weeks"]))
def test_the_past_n_units_end_at_the_reference(ref, n, unit):
    p = resolve(f"over the past {n} {unit}", ref)
    assert p.last == ref
    assert (p.last - p.first).days == n * (7 if unit == "weeks" else 1)
    assert resolve(f"in the last {n} {unit}", ref) == p


@given(REFS)
def test_calendar_months_and_years(ref):
    this = resolve("this month", ref)
    assert this.first == ref.replace(day=1)
    last = resolve("last month", ref)
    assert last.last == this.first - timedelta(days=1) and last.first.day == 1
    nxt = resolve("next month", ref)
    assert nxt.first == this.last + timedelta(days=1)
    assert resolve("last year", ref) == Period(date(ref.year - 1, 1, 1), date(ref.year - 1, 12, 31))
    earlier = resolve("earlier this year", ref)
    assert earlier == Period(date(ref.year, 1, 1), ref)


@given(REFS, st.sampled_from(["spring", "summer", "autumn", "fall", "winter"]))
def test_seasons(ref, season):
    first_month = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}[season]
    recent = resolve(f"in the {season}", ref)
    assert recent.first.month == first_month and recent.first.day == 1
    assert recent.first <= ref and (recent.last - recent.first).days in range(88, 93)
    last = resolve(f"last {season}", ref)
    assert last.last < ref and last.first.month == first_month
    nxt = resolve(f"next {season}", ref)
    assert nxt.first > ref and nxt.first.month == first_month
    assert (nxt.first - ref).days <= 366
    this = resolve(f"this {season}", ref)
    assert this in (recent, nxt)
    # "last" is the one before "this": the two never name the same season.
    assert last.first == this.first.replace(year=this.first.year - 1)


@given(REFS, st.integers(min_value=1, max_value=12))
def test_months(ref, month):
    name = calendar.month_name[month]
    recent = resolve(f"in {name}", ref)
    assert recent.first.month == month and recent.first <= ref
    assert (ref - recent.first).days < 366
    assert resolve(f"{name} 2023 was busy", ref) == Period(
        date(2023, month, 1), date(2023, month, calendar.monthrange(2023, month)[1])
    )


def test_verbs_that_spell_months_are_not_months():
    ref = date(2026, 11, 28)
    assert resolve("I may go, then march on", ref) is None
    assert resolve("I sat in the sun on a wed", ref) is None
    assert resolve("in May", ref) == Period(date(2026, 5, 1), date(2026, 5, 31))


def test_a_year_after_a_leading_word():
    ref = date(2026, 11, 28)
    assert resolve("What did I do in 2022?", ref) == Period(date(2022, 1, 1), date(2022, 12, 31))
    assert resolve("I have 2022 stamps", ref) is None


@given(st.text(max_size=300), REFS)
def test_any_text_resolves_to_a_period_or_none(text, ref):
    p = resolve(text, ref)
    assert p is None or p.first <= p.last


@given(
    st.lists(
        st.sampled_from(
            [
                "last",
                "next",
                "this",
                "week",
                "weekend",
                "ago",
                "in",
                "2",
                "after",
                "friday",
                "yesterday",
                "tomorrow",
                "day",
                "before",
                "winter",
                "may",
                "the",
                "month",
            ]
        ),
        max_size=12,
    ),
    st.dates(),
)
def test_any_phrase_on_any_day_of_the_calendar(parts, ref):
    p = resolve(" ".join(parts), ref)
    assert p is None or p.first <= p.last


def test_the_extremes_of_the_calendar_do_not_raise():
    assert resolve("next year", date(9999, 6, 1)) is None
    assert resolve("9999 years ago", date(2026, 1, 1)) is None
    assert resolve("last month", date(1, 1, 15)) is None


def test_words_read_a_bounded_prefix():
    assert len(words("a " * (MAX_CHARS * 2))) == MAX_CHARS // 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Can you remind me what I did last weekend?", (date(2026, 11, 21), date(2026, 11, 22))),
        ("this winter", (date(2026, 12, 1), date(2027, 2, 28))),
        ("last winter", (date(2025, 12, 1), date(2026, 2, 28))),
        ("this summer", (date(2026, 6, 1), date(2026, 8, 31))),
        ("a hike last summer", (date(2025, 6, 1), date(2025, 8, 31))),
        ("in the summer", (date(2026, 6, 1), date(2026, 8, 31))),
        ("the past week", (date(2026, 11, 21), date(2026, 11, 28))),
    ],
)
def test_examples_said_on_a_saturday(text, expected):
    assert resolve(text, date(2026, 11, 28)) == Period(*expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Jon find on 1 February, 2023?", (date(2023, 2, 1), date(2023, 2, 1))),
        ("two weeks before August 11, 2023", (date(2023, 8, 11), date(2023, 8, 11))),
        ("on the 3rd of March", (date(2023, 3, 3), date(2023, 3, 3))),
        ("on October 6", (date(2022, 10, 6), date(2022, 10, 6))),  # the latest by then
        ("on May 5th", (date(2023, 5, 5), date(2023, 5, 5))),
        ("Which state did she visit in summer 2021?", (date(2021, 6, 1), date(2021, 8, 31))),
        ("winter 2021", (date(2021, 12, 1), date(2022, 2, 28))),
    ],
)
def test_days_of_months_and_seasons_of_years(text, expected):
    assert resolve(text, date(2023, 5, 20)) == Period(*expected)


@pytest.mark.parametrize("text", ["February 30 2023", "the 31st of February", "I may 5 people"])
def test_days_that_do_not_exist_or_verbs_name_no_day(text):
    assert resolve(text, date(2023, 5, 20)) is None


@given(REFS, st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=31))
def test_a_day_without_a_year_is_the_latest_by_the_reference(ref, month, day):
    p = resolve(f"on {calendar.month_name[month]} {day}", ref)
    if p is not None:
        assert p.first == p.last <= ref and (ref - p.first).days < 366 + 1
        assert (p.first.month, p.first.day) == (month, day)
