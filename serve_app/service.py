"""The memory service's use cases, independent of HTTP and of Ray.

The ingress deployment builds one ``MemoryService`` with Ray handles behind the
``Embed`` and ``Search`` protocols; tests build it with in-process parts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from serve_app.errors import ApiError
from serve_app.retrieval.query import SearchQuery
from serve_app.store import MemoryStore, NewMemory, Owner


class Embed(Protocol):
    async def __call__(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray: ...


class Search(Protocol):
    async def __call__(self, q: SearchQuery, vector: np.ndarray) -> list[dict[str, Any]]: ...


class MemoryService:
    def __init__(self, store: MemoryStore, embed: Embed, search: Search) -> None:
        self.store = store
        self.embed = embed
        self._search = search

    async def add(
        self, owner: Owner, items: Sequence[NewMemory], actor: str
    ) -> list[dict[str, Any]]:
        vectors = await self.embed([i.content for i in items], is_query=False)
        return await self.store.add(owner, items, vectors, actor=actor)

    async def get(self, owner: Owner, item_id: uuid.UUID) -> dict[str, Any]:
        row = await self.store.get(owner, item_id)
        if row is None:
            raise ApiError(404, "not_found", "memory not found")
        return row

    async def update(
        self, owner: Owner, item_id: uuid.UUID, changes: dict[str, Any], actor: str
    ) -> dict[str, Any]:
        vector = None
        if "content" in changes:
            current = await self.get(owner, item_id)
            if current["content"] != changes["content"]:
                vector = (await self.embed([changes["content"]], is_query=False))[0]
        row = await self.store.update(owner, item_id, changes, vector, actor=actor)
        if row is None:
            raise ApiError(404, "not_found", "memory not found")
        return row

    async def delete(self, owner: Owner, item_id: uuid.UUID, actor: str) -> None:
        if not await self.store.delete(owner, item_id, actor=actor):
            raise ApiError(404, "not_found", "memory not found")

    async def history(self, owner: Owner, item_id: uuid.UUID) -> list[dict[str, Any]]:
        events = await self.store.history(owner, item_id)
        if events is None:
            raise ApiError(404, "not_found", "memory not found")
        return events

    async def search(self, q: SearchQuery) -> list[dict[str, Any]]:
        vector = (await self.embed([q.text], is_query=True))[0]
        return await self._search(q, vector)

    async def search_vector(self, q: SearchQuery, vector: np.ndarray) -> list[dict[str, Any]]:
        """Search with an embedding the caller already has (context: one embed, two searches)."""
        return await self._search(q, vector)
