"""``Api``: every call of the HTTP API, once; both clients inherit it.

Each endpoint is a static function building the ``Call`` (method, path, query,
body, result type); ``Endpoint`` turns it into a method of whichever client reads
it. Unset (None) arguments are left out so the service applies its defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from serve_app.client.call import Call, Message, clean, to_messages, with_body, with_params
from serve_app.client.endpoint import Endpoint
from serve_app.schemas import (
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyList,
    ContextResponse,
    DeletedCount,
    HistoryResponse,
    Memory,
    MemoryBatch,
    MemoryList,
    SearchResponse,
)

Json = dict[str, Any]


class Api:
    """The API's calls, independent of sync/async transport."""

    # memories
    @Endpoint
    @staticmethod
    def add(content: str, *, user_id: str | None = None, **fields: Any) -> Call[Memory]:
        """``fields``: type, tags, metadata, importance, agent_id, session_id (MemoryCreate)."""
        body = {"user_id": user_id, "content": content, **fields}
        return with_body("POST", "/v1/memories", body, Memory)

    @Endpoint
    @staticmethod
    def add_batch(items: Sequence[Json], *, user_id: str | None = None) -> Call[MemoryBatch]:
        return with_body(
            "POST", "/v1/memories/batch", {"user_id": user_id, "items": items}, MemoryBatch
        )

    @Endpoint
    @staticmethod
    def get(memory_id: UUID | str, *, user_id: str | None = None) -> Call[Memory]:
        return with_params("GET", f"/v1/memories/{memory_id}", {"user_id": user_id}, Memory)

    @Endpoint
    @staticmethod
    def update(
        memory_id: UUID | str, *, user_id: str | None = None, **changes: Any
    ) -> Call[Memory]:
        """``changes`` are sent as given: an explicit None is sent, not left out."""
        params = clean({"user_id": user_id})
        return Call("PATCH", f"/v1/memories/{memory_id}", params=params, json=changes, model=Memory)

    @Endpoint
    @staticmethod
    def delete(memory_id: UUID | str, *, user_id: str | None = None) -> Call[None]:
        return with_params("DELETE", f"/v1/memories/{memory_id}", {"user_id": user_id})

    @Endpoint
    @staticmethod
    def list(*, user_id: str | None = None, **filters: Any) -> Call[MemoryList]:
        return with_params("GET", "/v1/memories", {"user_id": user_id, **filters}, MemoryList)

    @Endpoint
    @staticmethod
    def delete_scope(
        *, user_id: str | None = None, agent_id: str | None = None, session_id: str | None = None
    ) -> Call[DeletedCount]:
        """Delete every memory of a user, agent or session; answers how many."""
        scope = {"user_id": user_id, "agent_id": agent_id, "session_id": session_id}
        return with_params("DELETE", "/v1/memories", scope, DeletedCount)

    @Endpoint
    @staticmethod
    def history(memory_id: UUID | str, *, user_id: str | None = None) -> Call[HistoryResponse]:
        path = f"/v1/memories/{memory_id}/history"
        return with_params("GET", path, {"user_id": user_id}, HistoryResponse)

    # retrieval
    @Endpoint
    @staticmethod
    def search(query: str, *, user_id: str | None = None, **options: Any) -> Call[SearchResponse]:
        """``options``: top_k, threshold, types, tags, filters, agent_id, session_id, mode,
        as_of, include_invalidated."""
        body = {"user_id": user_id, "query": query, **options}
        return with_body("POST", "/v1/search", body, SearchResponse)

    @Endpoint
    @staticmethod
    def context(
        query: str,
        *,
        user_id: str | None = None,
        history: Iterable[Message] | None = None,
        **options: Any,
    ) -> Call[ContextResponse]:
        """Ranked memories as a prompt block; ``history`` turns may be ``(role, content)``."""
        body = {"user_id": user_id, "query": query, **options}
        if history:
            body["history"] = to_messages(history)
        return with_body("POST", "/v1/context", body, ContextResponse)

    # sessions and facts (their shapes belong to the extraction API: plain dicts)
    @Endpoint
    @staticmethod
    def add_turns(
        session_id: str,
        messages: Iterable[Message],
        *,
        user_id: str | None = None,
        **options: Any,
    ) -> Call[Json | None]:
        body = {"user_id": user_id, "messages": to_messages(messages), **options}
        return with_body("POST", f"/v1/sessions/{session_id}/turns", body)

    @Endpoint
    @staticmethod
    def end_session(session_id: str, *, user_id: str | None = None) -> Call[Json | None]:
        return with_body("POST", f"/v1/sessions/{session_id}/end", {"user_id": user_id})

    @Endpoint
    @staticmethod
    def facts(*, user_id: str | None = None, **filters: Any) -> Call[Json]:
        return with_params("GET", "/v1/facts", {"user_id": user_id, **filters})

    # admin
    @Endpoint
    @staticmethod
    def create_key(role: str, *, user_id: str | None = None, **options: Any) -> Call[ApiKeyCreated]:
        body = {"role": role, "user_id": user_id, **options}
        return with_body("POST", "/v1/admin/keys", body, ApiKeyCreated)

    @Endpoint
    @staticmethod
    def list_keys() -> Call[ApiKeyList]:
        return Call("GET", "/v1/admin/keys", model=ApiKeyList)

    @Endpoint
    @staticmethod
    def get_key(key_id: UUID | str) -> Call[ApiKeyInfo]:
        return Call("GET", f"/v1/admin/keys/{key_id}", model=ApiKeyInfo)

    @Endpoint
    @staticmethod
    def revoke_key(key_id: UUID | str) -> Call[None]:
        return Call("DELETE", f"/v1/admin/keys/{key_id}")

    # health
    @Endpoint
    @staticmethod
    def health() -> Call[Json]:
        """Liveness: answers while the process serves HTTP."""
        return Call("GET", "/healthz")

    @Endpoint
    @staticmethod
    def ready() -> Call[Json]:
        """Each component's state; ``Unavailable`` (503) while the database does not answer."""
        return Call("GET", "/readyz")
