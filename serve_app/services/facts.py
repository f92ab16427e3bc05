"""Structured facts of a user (deterministic lookup, no embedding)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from serve_app.errors import ApiError
from serve_app.services.write_errors import write_errors
from serve_app.store import Owner
from serve_app.store.cursor import InvalidCursor, decode_fact_cursor, encode_fact_cursor
from serve_app.store.facts import EXPLICIT
from serve_app.store.guarded import GuardedWriter


class FactService:
    def __init__(self, writer: GuardedWriter) -> None:
        self.writer = writer  # writes: erasure guard, fact quota, validation
        self.store = writer.facts  # reads

    async def list(
        self,
        owner: Owner,
        *,
        include_inactive: bool = False,
        category: str | None = None,
        as_of: datetime | None = None,
        limit: int,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of facts (active ones; ``include_inactive`` adds replaced values, oldest
        first per key; ``as_of``: the values valid then) and the next page's cursor."""
        try:
            after = decode_fact_cursor(cursor) if cursor else None
        except InvalidCursor as exc:
            raise ApiError(400, "invalid_request", "invalid cursor") from exc
        rows = await self.store.list(
            owner,
            include_inactive=include_inactive,
            as_of=as_of,
            category=category,
            limit=limit + 1,
            after=after,
        )
        if len(rows) <= limit:
            return rows, None
        rows = rows[:limit]
        last = rows[-1]
        return rows, encode_fact_cursor(
            last["category"], last["key"], last["created_at"], last["id"]
        )

    async def set(
        self,
        owner: Owner,
        category: str,
        key: str,
        value: str,
        valid_from: datetime | None = None,
    ) -> dict[str, Any]:
        """An explicit value (a correction): replaces the active one whatever its
        confidence, the old value stays as history (valid until ``valid_from``, else
        now); extraction never overrides it."""
        # Written and read back in one transaction: a delete that lands between them
        # cannot remove a row it does not see yet (read apart, it made this a 500).
        with write_errors():
            async with self.writer.pool.connection() as conn, conn.transaction():
                await self.writer.upsert_fact(
                    owner,
                    category,
                    key,
                    value,
                    1.0,
                    source=EXPLICIT,
                    valid_from=valid_from,
                    conn=conn,
                )
                row = await self.store.get(owner, category, key, conn=conn)
        if row is None:  # the fact was refused without an error (cannot happen for EXPLICIT)
            raise ApiError(409, "conflict", f"fact {category}/{key} was not written; retry")
        return row

    async def delete(self, owner: Owner, category: str | None, key: str | None) -> int:
        """Delete facts with their history: all of the user's, a category, or one key."""
        if key is not None and category is None:
            raise ApiError(422, "invalid_request", "key needs category")
        return await self.writer.delete_facts(owner, category, key)
