"""Periods said relative to a day: "last week", "two months ago", "the Friday after next".

People say when something happened relative to the moment they speak. A question asked
on a known day ("what did I cook last weekend?") and a turn said on a known day ("we
fly out the Friday after next") name a period only together with that day, the
*reference*. :func:`resolve` reads the first period a text names and returns it as the
first and last day it covers, both included.

Conventions, for phrases that people use in more than one way:

- Weeks run Monday to Sunday (ISO 8601). "this week" is the reference's week, "last
  week" the one before, "next week" the one after, "the week after next" the one after
  that. A weekend is that week's Saturday and Sunday ("this weekend" on a Sunday is the
  day before and the day itself; "last weekend" on a Sunday is the weekend before).
- A weekday alone ("on Friday") is the most recent one, the reference day included:
  questions and memories mostly look back. "last Friday" is the most recent one before
  the reference day; "next Friday" and "this coming Friday" the first one after it;
  "this Friday" the one of the reference's week; "the Friday after next" is next Friday
  plus seven days.
- "N days ago" is that day; "N weeks ago" that week; "N months ago" that calendar month;
  "N years ago" that calendar year. "in N days/weeks/months/years" likewise forward.
  "the past/last N days/weeks/months/years" (also "over the past ...", "in the last
  ...") is the stretch from that long before the reference to the reference.
- "this/last/next month/year" are calendar months and years; "earlier this week/month/
  year" runs from its start to the reference, "later this ..." from the reference to its
  end.
- Seasons are the meteorological ones of the northern hemisphere: spring March-May,
  summer June-August, autumn (fall) September-November, winter December-February (the
  winter of a year starts in its December). A season alone ("in the spring") is the
  most recent one that has begun by the reference (the current one if it has);
  "this spring" the current one, else whichever of the latest passed and the next is
  closer ("this winter" said in late November is the coming one, "this summer" in
  October the past); "last spring" the one before "this spring", so the two never name
  the same season ("last summer" said in November is the summer of the year before:
  the one just ended is "this summer"); "next spring" the first that begins after the
  reference.
- A month alone ("in May") is the most recent May that has begun by the reference; with
  a year ("May 2023") that month; with a day ("August 11, 2023", "1 February 2023", "the
  3rd of March") that day, and without a year the latest such day by the reference; a
  season with a year ("summer 2021") that year's; a year after "in", "during", "since",
  "of", "before" or "after" ("in 2022") that year.
- "yesterday", "today"/"tonight", "tomorrow", "the day before yesterday", "the day after
  tomorrow".

Only the first period counts (a question names one). Words are read by one pass over the
lower-cased text split on non-letters/digits, each with a lookahead of at most five words:
linear in the text's length, no regular expression.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, timedelta

MAX_CHARS = 20_000  # longer texts are read up to here (a question is far shorter)

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple": 2,
    "few": 3,
    "several": 3,
}
_UNITS = {f"{u}{s}": u for u in ("day", "week", "month", "year") for s in ("", "s")}
# Full names only: "sat", "sun" and "wed" are ordinary words far more often than days.
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS |= {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m and m != "May"}
_MONTHS["sept"] = 9
# "may" and "march" are verbs more often than months: read as months only after a word
# that leads a date ("in May") or before a year ("May 2023").
_VERB_MONTHS = {"may", "march"}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_YEAR_LEAD = {"in", "during", "since", "of", "before", "after", "from", "until"}


@dataclass(frozen=True)
class Period:
    """Days ``first`` to ``last``, both included."""

    first: date
    last: date

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError("a period ends before it starts")

    @property
    def middle(self) -> date:
        return self.first + (self.last - self.first) // 2


def words(text: str) -> list[str]:
    """Lower-cased runs of letters and digits, in order (one pass)."""
    out: list[str] = []
    current: list[str] = []
    for ch in text[:MAX_CHARS].lower():
        if ch.isalnum():
            current.append(ch)
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


def resolve(text: str, reference: date) -> Period | None:
    """The first period ``text`` names, read against ``reference`` (module docstring)."""
    w = words(text)
    for i in range(len(w)):
        try:
            found = _at(w, i, reference)
        except OverflowError:  # a period past the calendar's ends (year 1 or 9999)
            found = None
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------- calendar helpers


def _day(d: date) -> Period:
    return Period(d, d)


def _week(d: date, shift: int = 0) -> Period:
    monday = d - timedelta(days=d.weekday()) + timedelta(weeks=shift)
    return Period(monday, monday + timedelta(days=6))


def _weekend(d: date, shift: int = 0) -> Period:
    week = _week(d, shift)
    return Period(week.first + timedelta(days=5), week.last)


def _month(year: int, month: int) -> Period | None:
    if not 1 <= year <= 9999:
        return None
    return Period(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _months_from(d: date, shift: int) -> Period | None:
    n = d.year * 12 + (d.month - 1) + shift
    return _month(n // 12, n % 12 + 1)


def _year(year: int) -> Period | None:
    return Period(date(year, 1, 1), date(year, 12, 31)) if 1 <= year <= 9999 else None


def _season(year: int, first_month: int) -> Period | None:
    """The season starting in ``first_month`` of ``year`` (winter runs into the next)."""
    start = _month(year, first_month)
    end = _months_from(date(year, first_month, 1), 2)
    return Period(start.first, end.last) if start and end else None


def _season_of(d: date) -> tuple[int, int]:
    """(year, first month) of the season ``d`` falls in."""
    if d.month == 12:
        return d.year, 12
    if d.month <= 2:
        return d.year - 1, 12
    return d.year, (d.month - 3) // 3 * 3 + 3


def _season_named(ref: date, first_month: int, which: str) -> Period | None:
    """``which``: "recent" (the latest begun by ``ref``), "nearest" (the current one,
    else the closer of the latest passed and the next), "last" (the one before the
    nearest), "next" (the first beginning after ``ref``)."""
    begun = date(ref.year, first_month, 1) <= ref
    year = ref.year if begun else ref.year - 1
    if which == "last":
        this = _season_named(ref, first_month, "nearest")
        return _season(this.first.year - 1, first_month) if this is not None else None
    if which == "next":
        year = ref.year + 1 if begun else ref.year
    if which == "nearest":  # "this summer": the one passed or to come, whichever is closer
        passed, coming = _season(year, first_month), _season(year + 1, first_month)
        if passed is None or coming is None or passed.last >= ref:
            return passed
        return coming if (coming.first - ref) < (ref - passed.last) else passed
    return _season(year, first_month)


def _shift_unit(ref: date, unit: str, n: int) -> Period | None:
    """The day/week/month/year ``n`` units from ``ref`` (negative: back)."""
    try:
        if unit == "day":
            return _day(ref + timedelta(days=n))
        if unit == "week":
            return _week(ref, n)
        if unit == "month":
            return _months_from(ref, n)
        return _year(ref.year + n)
    except OverflowError:
        return None


def _stretch_back(ref: date, unit: str, n: int) -> Period | None:
    """From ``n`` units before ``ref`` to ``ref``."""
    try:
        if unit in ("day", "week"):
            return Period(ref - timedelta(days=n * (7 if unit == "week" else 1)), ref)
        months = n * (12 if unit == "year" else 1)
        start = _months_from(ref, -months)
        if start is None:
            return None
        day = min(ref.day, calendar.monthrange(start.first.year, start.first.month)[1])
        return Period(start.first.replace(day=day), ref)
    except OverflowError:
        return None


def _digits(word: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes "¹" and "٣", which ``int`` refuses
    or reads as numbers nobody wrote as such."""
    return word.isascii() and word.isdigit()


def _is_year(word: str) -> bool:
    return len(word) == 4 and _digits(word) and word[:2] in ("19", "20")


def _number(word: str) -> int | None:
    if _digits(word) and len(word) <= 4:
        return int(word)
    return _NUMBERS.get(word)


def _count_unit(w: list[str], i: int) -> tuple[int, str, int] | None:
    """(count, unit, words used) for "two weeks", "a couple of days", "3 months"."""
    n = _number(w[i]) if i < len(w) else None
    if n is None:
        return None
    j = i + 1
    if w[i] in ("a", "an") and j < len(w) and w[j] in ("couple", "few"):
        n, j = _NUMBERS[w[j]], j + 1
    if j < len(w) and w[j] == "of":
        j += 1
    if j < len(w) and w[j] in _UNITS:
        return n, _UNITS[w[j]], j + 1 - i
    return None


# ---------------------------------------------------------------- the phrases


def _at(w: list[str], i: int, ref: date) -> Period | None:
    """The period of a phrase starting at word ``i``, or None."""
    word = w[i]
    nxt = w[i + 1] if i + 1 < len(w) else ""
    after = w[i + 2] if i + 2 < len(w) else ""

    if word == "day" and nxt in ("before", "after") and after in ("yesterday", "tomorrow"):
        if (nxt, after) == ("before", "yesterday"):
            return _day(ref - timedelta(days=2))
        if (nxt, after) == ("after", "tomorrow"):
            return _day(ref + timedelta(days=2))
    if word == "yesterday":
        return _day(ref - timedelta(days=1))
    if word in ("today", "tonight"):
        return _day(ref)
    if word == "tomorrow":
        return _day(ref + timedelta(days=1))

    # "two weeks ago"
    counted = _count_unit(w, i)
    if counted is not None:
        n, unit, used = counted
        if i + used < len(w) and w[i + used] == "ago":
            return _shift_unit(ref, unit, -n)

    # "in two weeks" (forward), "in the last three days", "over the past two months"
    if word in ("in", "within") and (c := _count_unit(w, i + 1)) is not None:
        return _shift_unit(ref, c[1], c[0])
    counted = _count_unit(w, i + 1) if word in ("past", "last", "previous") else None
    if counted is not None and (counted[0] > 1 or _digits(w[i + 1])):
        return _stretch_back(ref, counted[1], counted[0])

    # "the Friday after next", "the week after next"
    if nxt == "after" and after == "next":
        if word in _WEEKDAYS:
            return _day(_next_weekday(ref, _WEEKDAYS[word]) + timedelta(days=7))
        if word == "week":
            return _week(ref, 2)
        if word == "weekend":
            return _weekend(ref, 2)

    # "earlier this month", "later this year"
    if word in ("earlier", "later") and nxt == "this" and after in ("week", "month", "year"):
        whole = _shift_unit(ref, after, 0)
        if whole is None:
            return None
        return Period(whole.first, ref) if word == "earlier" else Period(ref, whole.last)

    # "last/this/next/coming week|weekend|month|year|<weekday>|<season>|<month>"
    if word in ("last", "this", "next", "coming", "previous", "past"):
        target = nxt
        if word == "this" and nxt == "coming":
            word, target = "coming", after
        elif word == "this" and nxt == "past":
            word, target = "last", after
        return _relative(word, target, ref)

    if word in _WEEKDAYS and (i == 0 or w[i - 1] not in ("last", "this", "next", "coming")):
        return _day(_recent_weekday(ref, _WEEKDAYS[word]))

    if word in _SEASONS and _is_year(nxt):  # "summer 2021": that year's
        return _season(int(nxt), _SEASONS[word])
    if word in _SEASONS and i > 0 and w[i - 1] in ("in", "the", "during"):
        return _season_named(ref, _SEASONS[word], "recent")

    if word in _MONTHS:
        return _month_phrase(w, i, ref)

    if word in _YEAR_LEAD and _is_year(nxt):
        return _year(int(nxt))
    return None


def _day_of_month(word: str) -> int | None:
    """``11``, ``11th``, ``1st`` as a day of the month (1..31), else None."""
    digits = word[:-2] if word[-2:] in ("st", "nd", "rd", "th") else word
    if 1 <= len(digits) <= 2 and _digits(digits) and 1 <= int(digits) <= 31:
        return int(digits)
    return None


def _month_phrase(w: list[str], i: int, ref: date) -> Period | None:
    """A month at word ``i``: "August 11, 2023", "1 February 2023", "October 6" (the
    latest one by the reference), "May 2023", "in May"."""
    month = _MONTHS[w[i]]
    prev = w[i - 1] if i > 0 else ""
    nxt = w[i + 1] if i + 1 < len(w) else ""
    after = w[i + 2] if i + 2 < len(w) else ""
    day = _day_of_month(nxt)
    year = after if day is not None else nxt
    if day is None and (day := _day_of_month(prev)) is not None:  # "1 February"
        year = nxt
    if day is None and prev == "of" and i > 1:  # "the 3rd of March"
        day, year = _day_of_month(w[i - 2]), nxt
    lead = prev in _YEAR_LEAD or prev in ("on", "the", "of")
    if day is not None and (_is_year(year) or w[i] not in _VERB_MONTHS or lead):
        y = int(year) if _is_year(year) else ref.year
        if day > calendar.monthrange(y, month)[1]:
            return None
        when = date(y, month, day)
        if not _is_year(year) and when > ref:  # "October 6" said in May: last October's
            if day > calendar.monthrange(y - 1, month)[1]:
                return None
            when = date(y - 1, month, day)
        return _day(when)
    if _is_year(nxt):
        return _month(int(nxt), month)
    if prev in _YEAR_LEAD or (prev in ("the", "on") and w[i] not in _VERB_MONTHS):
        return _recent_month(ref, month)
    return None


def _relative(word: str, target: str, ref: date) -> Period | None:
    if word == "past" and target in _UNITS:  # "the past week": the last seven days
        return _stretch_back(ref, _UNITS[target], 1)
    step = {"last": -1, "previous": -1, "past": -1, "this": 0, "next": 1, "coming": 1}[word]
    if target == "week":
        return _week(ref, step)
    if target == "weekend":
        return _weekend(ref, step)
    if target in ("month", "year"):
        return _shift_unit(ref, target, step)
    if target in _WEEKDAYS:
        day = _WEEKDAYS[target]
        if step < 0:
            return _day(_recent_weekday(ref - timedelta(days=1), day))
        if step > 0:
            return _day(_next_weekday(ref, day))
        return _day(_week(ref).first + timedelta(days=day))
    if target in _SEASONS:
        which = {-1: "last", 0: "nearest", 1: "next"}[step]
        return _season_named(ref, _SEASONS[target], which)
    if target in _MONTHS:
        month = _MONTHS[target]
        if step == 0:
            return _month(ref.year, month)
        if step < 0:
            return _recent_month(date(ref.year, ref.month, 1) - timedelta(days=1), month)
        year = ref.year if month > ref.month else ref.year + 1
        return _month(year, month)
    return None


def _recent_weekday(ref: date, weekday: int) -> date:
    return ref - timedelta(days=(ref.weekday() - weekday) % 7)


def _next_weekday(ref: date, weekday: int) -> date:
    return ref + timedelta(days=(weekday - ref.weekday() - 1) % 7 + 1)


def _recent_month(ref: date, month: int) -> Period | None:
    year = ref.year if month <= ref.month else ref.year - 1
    return _month(year, month)
