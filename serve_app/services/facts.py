"""Structured facts of a user (deterministic lookup, no embedding)."""

from __future__ import annotations

from typing import Any

from serve_app.errors import ApiError
from serve_app.store import Owner
from serve_app.store.facts import EXPLICIT, FactStore


class FactService:
    def __init__(self, store: FactStore) -> None:
        self.store = store

    async def list(
        self, owner: Owner, *, include_inactive: bool = False, category: str | None = None
    ) -> list[dict[str, Any]]:
        """Active facts; ``include_inactive`` adds replaced values (oldest first per key)."""
        rows = await self.store.list(owner, include_inactive=include_inactive)
        if category is not None:
            rows = [r for r in rows if r["category"] == category]
        return rows

    async def set(self, owner: Owner, category: str, key: str, value: str) -> dict[str, Any]:
        """An explicit value (a correction): replaces the active one whatever its
        confidence, the old value stays as history; extraction never overrides it."""
        await self.store.upsert(owner, category, key, value, 1.0, source=EXPLICIT)
        row = await self.store.get(owner, category, key)
        assert row is not None
        return row

    async def delete(self, owner: Owner, category: str | None, key: str | None) -> int:
        """Delete facts with their history: all of the user's, a category, or one key."""
        if key is not None and category is None:
            raise ApiError(422, "invalid_request", "key needs category")
        return await self.store.delete(owner, category, key)
