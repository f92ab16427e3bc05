"""Time in retrieval: when a memory was said, the day it refers to, what a question asks.

A memory's *said* day is its event time ``valid_from`` (the date of the turn it was
extracted from, or a date the client or the model gave), else ``metadata.session_date``
(ISO 8601, when the conversation took place, as a chat platform records it), else its
created time. Its *referenced*
day shifts that by a relative expression in the text: "last year" said on 2023-05-08
refers to about 2022-05-08. A question asks about time when it says "when", names a
period ("in 2022", "in May 2023") or asks for the latest ("recently", "last time");
:func:`time_scores` turns that into a 0..1 score per memory:

- "when": memories whose text mentions a time (the answer is usually stated there);
- a named period: memories said or referring to a day inside it;
- "recently": later referenced days score higher.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
import re2  # RE2: linear time on request text (queries, memory texts)

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTH = "|".join(_MONTHS)
_UNIT_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}
_NUMBER = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "few": 3, "four": 4, "five": 5}
_NUMBER |= {"six": 6, "several": 4, "couple": 2, "ten": 10}
_AGO = re2.compile(
    r"(?i)\b(\d+|a|an|one|two|three|four|five|six|ten|few|several|couple)\s+(?:of\s+)?"
    r"(day|week|month|year)s?\s+ago\b"
)
_LAST = re2.compile(r"(?i)\b(last|next|this past|past)\s+(day|week|weekend|month|year)\b")
_YESTERDAY = re2.compile(r"(?i)\b(yesterday|tomorrow)\b")
_TIME_WORDS = re2.compile(
    rf"(?i)\b(yesterday|today|tonight|tomorrow|ago|last|next|since|recently|weekend|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    rf"(?:19|20)\d\d|{_MONTH})\b"
)
_WHEN = re2.compile(
    r"(?i)\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bhow long (?:ago|since)\b"
)
_RECENT = re2.compile(r"(?i)\b(recently|lately|latest|most recent|last time)\b")
# Backtracking took O(n^2) on a month and a run of spaces ("in may" + 8000 spaces: 15 s).
_PERIOD = re2.compile(
    rf"(?i)\b(?:in|during|of|since|before|after)\s+(?:({_MONTH})\s*,?\s*)?((?:19|20)\d\d)?\b"
)
_EPOCH = date(1970, 1, 1)


def day_number(d: date) -> float:
    return float((d - _EPOCH).days)


def said_day(row: dict[str, Any]) -> float:
    """Event time (``valid_from``) as a day number, else ``metadata.session_date``'s,
    else the created time's; NaN if none."""
    event = row.get("valid_from")
    if isinstance(event, datetime):
        return day_number(event.astimezone(UTC).date())
    when = (row.get("metadata") or {}).get("session_date")
    if isinstance(when, str):
        try:
            return day_number(datetime.fromisoformat(when).date())
        except ValueError:
            pass
    created = row.get("created_at")
    if isinstance(created, datetime):
        return day_number(created.astimezone(UTC).date())
    return float("nan")


def referenced_day(text: str, said: float) -> float:
    """The day ``text`` talks about: ``said`` shifted by its first relative expression."""
    if m := _AGO.search(text):
        n = m.group(1).lower()
        count = int(n) if n.isdigit() else _NUMBER.get(n, 1)
        return said - count * _UNIT_DAYS[m.group(2).lower()]
    if m := _LAST.search(text):
        sign = 1 if m.group(1).lower() == "next" else -1
        return said + sign * _UNIT_DAYS[m.group(2).lower()]
    if m := _YESTERDAY.search(text):
        return said + (1 if m.group(1).lower() == "tomorrow" else -1)
    return said


def mentions_time(text: str) -> bool:
    return _TIME_WORDS.search(text) is not None


@dataclass(frozen=True)
class TimeIntent:
    when: bool = False  # asks for a time
    recent: bool = False  # asks for the latest
    period: tuple[float, float] | None = None  # [first, last] day named by the question

    def __bool__(self) -> bool:
        return self.when or self.recent or self.period is not None


def time_intent(text: str) -> TimeIntent:
    period = None
    for m in _PERIOD.finditer(text):
        month, year = m.group(1), m.group(2)
        if not year:
            continue  # a month without a year is ambiguous across a long history
        y = int(year)
        if month:
            mo = _MONTHS[month.lower()]
            last = calendar.monthrange(y, mo)[1]
            period = (day_number(date(y, mo, 1)), day_number(date(y, mo, last)))
        else:
            period = (day_number(date(y, 1, 1)), day_number(date(y, 12, 31)))
        break
    return TimeIntent(
        when=_WHEN.search(text) is not None,
        recent=_RECENT.search(text) is not None,
        period=period,
    )


def time_scores(
    intent: TimeIntent, said: np.ndarray, referenced: np.ndarray, timed: np.ndarray
) -> np.ndarray:
    """0..1 per memory: how well its time fits what the question asks (0: no intent)."""
    out = np.zeros(len(said), dtype=np.float32)
    if intent.when:
        out += timed
    if intent.period is not None:
        lo, hi = intent.period
        inside = ((said >= lo) & (said <= hi)) | ((referenced >= lo) & (referenced <= hi))
        out += inside
    if intent.recent and len(referenced):
        ok = ~np.isnan(referenced)
        if ok.any():
            first, last = np.nanmin(referenced), np.nanmax(referenced)
            span = last - first if last > first else 1.0
            out += np.where(ok, (referenced - first) / span, 0.0).astype(np.float32)
    n = int(intent.when) + int(intent.period is not None) + int(intent.recent)
    return out / n if n else out
