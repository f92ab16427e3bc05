"""``Api``: every call of the HTTP API, once; both clients inherit it.

Each endpoint is a static function building the ``Call`` (method, path, query,
body, result type); ``Endpoint`` turns it into a method of whichever client reads
it. Unset (None) arguments are left out so the service applies its defaults.
Memories, retrieval and health are here; sessions, facts, users, chat and
export/import in ``api_data``; admin calls in ``api_admin``; ``routes`` maps each
route of the service to its methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from serve_app.client.api_admin import AdminApi
from serve_app.client.api_data import DataApi
from serve_app.client.api_documents import DocumentsApi
from serve_app.client.call import (
    Call,
    Message,
    clean,
    if_match_header,
    to_messages,
    with_body,
    with_params,
)
from serve_app.client.endpoint import Endpoint
from serve_app.responses import Health, MemoryBatchResult, QueuedJob, Readiness
from serve_app.schemas import (
    ContextResponse,
    DeletedCount,
    HistoryResponse,
    Memory,
    MemoryList,
    SearchResponse,
)

Json = dict[str, Any]


class Api(DataApi, DocumentsApi, AdminApi):
    """The API's calls, independent of sync/async transport."""

    # memories
    @Endpoint
    @staticmethod
    def add(content: str, *, user_id: str | None = None, **fields: Any) -> Call[Memory | QueuedJob]:
        """``fields``: type, tags, metadata, importance, agent_id, session_id, valid_from,
        supersedes, infer (MemoryCreate); ``infer: true`` answers a ``QueuedJob``."""
        body = {"user_id": user_id, "content": content, **fields}
        call = with_body("POST", "/v1/memories", body, Memory)
        return replace(call, by_status={202: QueuedJob})

    @Endpoint
    @staticmethod
    def add_batch(items: Sequence[Json], *, user_id: str | None = None) -> Call[MemoryBatchResult]:
        """``items``: MemoryCreate objects; ``infer: true`` ones come back as ``jobs``."""
        body = {"user_id": user_id, "items": items}
        return with_body("POST", "/v1/memories/batch", body, MemoryBatchResult)

    @Endpoint
    @staticmethod
    def get(memory_id: UUID | str, *, user_id: str | None = None) -> Call[Memory]:
        return with_params("GET", f"/v1/memories/{memory_id}", {"user_id": user_id}, Memory)

    @Endpoint
    @staticmethod
    def update(
        memory_id: UUID | str,
        *,
        user_id: str | None = None,
        if_match: int | None = None,
        **changes: Any,
    ) -> Call[Memory]:
        """``changes`` are sent as given: an explicit None is sent, not left out.
        ``if_match``: the version read (409 if the memory changed since)."""
        params = clean({"user_id": user_id})
        path, headers = f"/v1/memories/{memory_id}", if_match_header(if_match)
        return Call("PATCH", path, params=params, json=changes, model=Memory, headers=headers)

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
        as_of, reference_date (the day the query is asked: "last week" is read against
        it; ISO 8601), include_invalidated, explain; the knowledge base: knowledge
        (default true), scopes (user/agent/org), document_ids. Chunks carry ``citation``.
        ``rerank``: true (the default back-end) or "onnx"/"llm": the candidates re-scored
        (422 when the tenant is offered none; the response's ``rerank`` says what ran)."""
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
        """Ranked memories as a prompt block; ``history`` turns may be ``(role, content)``.
        ``options``: session_id, agent_id, token_budget, top_k, reference_date (the day the
        message is said; ISO 8601), ``explain`` (the response's ``left_out``: candidates
        not shown and the rule that left each out), ``rerank`` (as in :meth:`search`)."""
        body = {"user_id": user_id, "query": query, **options}
        if history:
            body["history"] = to_messages(history)
        return with_body("POST", "/v1/context", body, ContextResponse)

    @Endpoint
    @staticmethod
    def explain_context(
        query: str, *, user_id: str | None = None, **options: Any
    ) -> Call[ContextResponse]:
        """``GET /v1/context?explain=true``: the block for ``query`` with ``left_out``, the
        candidates it did not show and the rule that left each out (gate, top_k, budget,
        dedupe, profile, knowledge), for an operator looking at a miss. ``options`` as
        :meth:`context` without ``history``."""
        params = {"user_id": user_id, "query": query, "explain": True, **options}
        return with_params("GET", "/v1/context", params, ContextResponse)

    # health
    @Endpoint
    @staticmethod
    def health() -> Call[Health]:
        """Liveness: answers while the process serves HTTP."""
        return Call("GET", "/healthz", model=Health)

    @Endpoint
    @staticmethod
    def ready() -> Call[Readiness]:
        """Each component's state; ``Unavailable`` (503) while the database does not answer."""
        return Call("GET", "/readyz", model=Readiness)
