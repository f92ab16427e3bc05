"""Time in retrieval: when a memory was said, the day it refers to, what a question asks.

A memory's *said* day is its event time ``valid_from`` (the date of the turn it was
extracted from, or a date the client or the model gave), else ``metadata.session_date``
(ISO 8601, when the conversation took place, as a chat platform records it), else its
created time. Its *referenced*
day is the middle of the period a relative expression in the text names, read against
the said day (:mod:`serve_app.retrieval.periods`): "last year" said on 2023-05-08 refers
to 2022. A question asks about time when it says "when", names a period ("in 2022", "in
May 2023", "last week", "two months ago": read against the question's reference day,
today unless the caller gives one) or asks for the latest ("recently", "last time");
:func:`time_scores` turns that into a 0..1 score per memory:

- "when": memories whose text mentions a time (the answer is usually stated there);
- a named period: memories said or referring to a day inside it;
- "recently": later referenced days score higher.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import re2  # RE2: linear time on request text (queries, memory texts)

from serve_app.retrieval.periods import resolve

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTH = "|".join(_MONTHS)
_TIME_WORDS = re2.compile(
    rf"(?i)\b(yesterday|today|tonight|tomorrow|ago|last|next|since|recently|weekend|"
    rf"monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    rf"(?:19|20)\d\d|{_MONTH})\b"
)
# Words without which no text names a period (serve_app/retrieval/periods.py): a memory
# without any is not scanned word by word.
_PERIOD_WORDS = re2.compile(
    rf"(?i)\b(yesterday|today|tonight|tomorrow|ago|weeks?|weekends?|months?|years?|days?|"
    rf"spring|summer|autumn|fall|winter|monday|tuesday|wednesday|thursday|friday|"
    rf"saturday|sunday|(?:19|20)\d\d|{_MONTH})\b"
)
_WHEN = re2.compile(
    r"(?i)\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bhow long (?:ago|since)\b"
)
_RECENT = re2.compile(r"(?i)\b(recently|lately|latest|most recent|last time)\b")
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
    """The day ``text`` talks about: the middle of the first period it names, read
    against ``said`` (a day number); ``said`` when it names none."""
    if np.isnan(said) or _PERIOD_WORDS.search(text) is None:
        return said  # most memories name no time: no word scan for them
    period = resolve(text, _EPOCH + timedelta(days=int(said)))
    return said if period is None else day_number(period.middle)


def mentions_time(text: str) -> bool:
    return _TIME_WORDS.search(text) is not None


@dataclass(frozen=True)
class TimeIntent:
    when: bool = False  # asks for a time
    recent: bool = False  # asks for the latest
    period: tuple[float, float] | None = None  # [first, last] day named by the question

    def __bool__(self) -> bool:
        return self.when or self.recent or self.period is not None


def time_intent(text: str, reference: date | None = None) -> TimeIntent:
    """What ``text`` asks about time; periods are read against ``reference`` (the day the
    question is asked; None: today, UTC)."""
    ref = reference if reference is not None else datetime.now(UTC).date()
    period = resolve(text, ref)
    return TimeIntent(
        when=_WHEN.search(text) is not None,
        recent=_RECENT.search(text) is not None,
        period=None if period is None else (day_number(period.first), day_number(period.last)),
    )


def in_period(period: tuple[float, float], said: np.ndarray, referenced: np.ndarray) -> np.ndarray:
    """1.0 per memory said or referring to a day inside ``period`` (day numbers), else 0."""
    lo, hi = period
    inside = ((said >= lo) & (said <= hi)) | ((referenced >= lo) & (referenced <= hi))
    return inside.astype(np.float32)


def time_scores(
    intent: TimeIntent, said: np.ndarray, referenced: np.ndarray, timed: np.ndarray
) -> np.ndarray:
    """0..1 per memory: how well its time fits what the question asks (0: no intent)."""
    out = np.zeros(len(said), dtype=np.float32)
    if intent.when:
        out += timed
    if intent.period is not None:
        out += in_period(intent.period, said, referenced)
    if intent.recent and len(referenced):
        ok = ~np.isnan(referenced)
        if ok.any():
            first, last = np.nanmin(referenced), np.nanmax(referenced)
            span = last - first if last > first else 1.0
            out += np.where(ok, (referenced - first) / span, 0.0).astype(np.float32)
    n = int(intent.when) + int(intent.period is not None) + int(intent.recent)
    return out / n if n else out
