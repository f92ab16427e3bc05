"""Dates as models write them: ISO and the common English forms, parsed by a token scan.

The extraction prompt asks for ``valid_from`` as ``YYYY-MM-DD``, and shows each turn's
day as ``Thu 2026-11-19``; real models echo that form back ("Thu 2026-04-02"), spell
dates out ("Thursday, April 2, 2026", "2 Apr 2026") or use slashes. Before this module
only ISO parsed and everything else silently fell back to the turn's date.

Accepted (case-insensitive; commas, "the", "of" and ordinal suffixes ignored; a leading
or trailing weekday ignored: the date wins when the two disagree):

- ISO 8601 date or date-time, ``Z`` or an offset (``2026-04-02``, ``2026-04-02T10:00Z``,
  ``2026-04-02 10:00:00+02:00``); a time after any of the forms below is dropped;
- ``April 2, 2026``, ``Apr 2nd 2026``, ``2 Apr 2026``, ``2nd of April, 2026``;
- ``April 2026`` / ``2026-04`` (the first of the month), a bare year (January 1st);
- slashes: ``YYYY/MM/DD``; ``A/B/YYYY`` is month/day/year (the US order, which English
  model output follows) unless ``A`` > 12, then day/month/year; dots ``DD.MM.YYYY`` are
  day.month.year (the European order they come from).

A naive time is read as UTC. Years outside 1900..now+10 and impossible days are
rejected. Only ``str`` methods over at most :data:`MAX_CHARS` characters: linear time,
no regular expression runs on model output.
"""

from __future__ import annotations

from datetime import UTC, datetime

MAX_CHARS = 64  # longer is not a date a model meant
MONTHS = {
    name: n
    for n, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        1,
    )
    for name in names
}
_WEEKDAYS_TEXT = """mon monday tue tues tuesday wed weds wednesday thu thur thurs thursday
    fri friday sat saturday sun sunday"""
WEEKDAYS = frozenset(_WEEKDAYS_TEXT.split())
_FILLER = frozenset({"the", "of", "on"})
_ORDINAL = ("st", "nd", "rd", "th")


def parse_when(value: object) -> datetime | None:
    """The instant ``value`` names (aware, UTC when naive), or None if it is not a date."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > MAX_CHARS:
        return None
    when = _iso(text)
    if when is None:
        tokens = [t for t in text.replace(",", " ").lower().split() if t not in _FILLER]
        while tokens and tokens[0].rstrip(".") in WEEKDAYS:
            tokens = tokens[1:]
        while tokens and tokens[-1].rstrip(".") in WEEKDAYS:
            tokens = tokens[:-1]
        if len(tokens) > 1 and tokens[-1] in ("am", "pm", "utc", "gmt", "z"):
            tokens = tokens[:-1]
        if len(tokens) > 1 and ":" in tokens[-1]:  # a time after the date: the day is enough
            tokens = tokens[:-1]
        when = _iso(tokens[0].upper()) if len(tokens) == 1 else None
        when = when or _tokens(tokens)
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if not 1900 <= when.year <= datetime.now(UTC).year + 10:
        return None
    return when


def _iso(text: str) -> datetime | None:
    candidate = text.replace("Z", "+00:00").replace("z", "+00:00")
    if not candidate[:1].isdigit():
        return None
    try:
        return datetime.fromisoformat(candidate)
    except ValueError:
        return None


def _tokens(tokens: list[str]) -> datetime | None:
    """A date from 1-3 tokens (month names, numbers, a slashed or dotted date)."""
    if len(tokens) == 1:
        return _single(tokens[0])
    if len(tokens) == 2:  # "April 2026" / "2026 April"
        month, year = _month(tokens[0]), _number(tokens[1])
        if month is None:
            month, year = _month(tokens[1]), _number(tokens[0])
        return _make(year, month, 1) if month is not None and _is_year(year) else None
    if len(tokens) != 3:
        return None
    first, second, third = tokens
    if _month(first) is not None:  # April 2 2026
        return _make(_number(third), _month(first), _day(second))
    if _month(second) is not None:  # 2 April 2026 / 2026 April 2
        if _is_year(_number(first)):
            return _make(_number(first), _month(second), _day(third))
        return _make(_number(third), _month(second), _day(first))
    return None


def _single(token: str) -> datetime | None:
    """``2026/04/02``, ``04/02/2026``, ``02.04.2026``, ``2026-04``, ``2026``."""
    for sep in ("/", ".", "-"):
        parts = token.split(sep)
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            a, b, c = (int(p) for p in parts)
            if len(parts[0]) == 4:
                return _make(a, b, c)
            if sep == ".":
                return _make(c, b, a)
            if sep == "/":
                return _make(c, a, b) if a <= 12 else _make(c, b, a)
            return None
        if len(parts) == 2 and sep == "-" and all(p.isdigit() for p in parts):
            return _make(int(parts[0]), int(parts[1]), 1) if len(parts[0]) == 4 else None
    year = _number(token)
    return _make(year, 1, 1) if len(token) == 4 and _is_year(year) else None


def _month(token: str) -> int | None:
    return MONTHS.get(token.rstrip("."))


def _day(token: str) -> int | None:
    for suffix in _ORDINAL:
        if token.endswith(suffix) and token[: -len(suffix)].isdigit():
            token = token[: -len(suffix)]
            break
    return int(token) if token.isdigit() and len(token) <= 2 else None


def _number(token: str) -> int | None:
    return int(token) if token.isdigit() and len(token) <= 4 else None


def _is_year(year: int | None) -> bool:
    return year is not None and year >= 1000


def _make(year: int | None, month: int | None, day: int | None) -> datetime | None:
    if year is None or month is None or day is None or not _is_year(year):
        return None
    try:
        return datetime(year, month, day)
    except ValueError:
        return None
