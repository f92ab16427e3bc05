"""Datetimes reach PostgreSQL in UTC.

ISO 8601 allows offsets up to ±23:59, PostgreSQL's text input only ±15:59: a client's
``expires_at`` of ``...-16:58`` would fail inside the statement (a 500). Dumping every
aware datetime as UTC keeps the instant and fits any offset; an instant whose UTC form
leaves Python's range (year 1 or 9999 plus an offset) is clamped to that range's end.
"""

from __future__ import annotations

from datetime import UTC, datetime

from psycopg import AsyncConnection
from psycopg.types.datetime import DatetimeDumper

_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)


def as_utc(value: datetime) -> datetime:
    """The same instant in UTC (naive values are left as they are)."""
    if value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return _FIRST if value.year == datetime.min.year else _LAST


class UtcDatetimeDumper(DatetimeDumper):
    def dump(self, obj: datetime) -> bytes | bytearray | memoryview | None:
        return super().dump(as_utc(obj))


def register(conn: AsyncConnection) -> None:
    conn.adapters.register_dumper(datetime, UtcDatetimeDumper)
