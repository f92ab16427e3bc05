"""Structured facts of a user (deterministic lookup, no embedding)."""

from __future__ import annotations

from typing import Any

from serve_app.store import Owner
from serve_app.store.facts import FactStore


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
