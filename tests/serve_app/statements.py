"""Counting the SQL statements a piece of code runs: round trips are what these tests pin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


class StatementCounter:
    """Stands in for a pool's ``connection()``, counting ``execute`` calls on what it lends.

    Use it as the pool (``obj.pool = StatementCounter(pool)``) or patch it over the
    pool's own method (``monkeypatch.setattr(pool, "connection", counter.connection)``).
    """

    def __init__(self, pool: Any) -> None:
        self.connect, self.statements = pool.connection, 0

    @asynccontextmanager
    async def connection(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with self.connect(*args, **kwargs) as conn:
            yield _Counted(conn, self)


class _Counted:
    def __init__(self, conn: Any, counter: StatementCounter) -> None:
        self._conn, self._counter = conn, counter

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._counter.statements += 1
        return await self._conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)
