"""mem0 memory routes (``add``/``search``/``get_all`` v3; by-id, delete_all, batch v1),
adapted onto the memory, session and search services of ``/v1``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError

from serve_app.api.deps import Caller, Svc
from serve_app.api.mem0 import shapes as m
from serve_app.api.mem0.documents import DocumentPart, added, document_input, split_messages
from serve_app.api.mem0.scope import (
    Scope,
    bad,
    entity_scope,
    scope_owner,
)
from serve_app.api.search import rerank_step
from serve_app.errors import ApiError
from serve_app.extraction.guidance import META_CATEGORIES
from serve_app.retrieval.query import SearchQuery
from serve_app.schemas import MemoryFields, MemoryPatch, check_content
from serve_app.services.memories import knowledge_query
from serve_app.services.rerank import report
from serve_app.tenant_settings import Guidance

router = APIRouter(tags=["mem0"])
QUEUED = "Memory processing has been queued for background execution"


def _validated(model: type, **values: Any) -> Any:
    """A memserve model from mem0 input; its validation errors are the caller's 422."""
    try:
        return model.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "body"
        raise ApiError(422, "invalid_request", f"{where}: {first.get('msg')}") from exc


def _too_many(n: int, limit: int) -> None:
    if n > limit:
        raise ApiError(422, "invalid_request", f"at most {limit} items per request")


@router.post("/v3/memories/add/", response_model=m.AddResponse)
async def add(body: m.AddRequest, caller: Caller, services: Svc):
    """``infer`` (mem0's default) with an LLM configured runs one extraction job and
    waits for it up to ``MEMSERVE_EXTRACT_SYNC_WAIT_S``: ``SUCCEEDED`` with mem0's event
    list (ADD / UPDATE with ``previous_memory`` / DELETE / NONE, with ids), or, when it
    takes longer or the LLM is unavailable, mem0's async shape (``status: PENDING``,
    ``event_id`` = the job, ``GET /v1/sessions/{event_id}``) while it goes on.
    Otherwise each non-system message is stored verbatim (``SUCCEEDED``, ADD events).

    Document messages (``pdf_url``, ``mdx_url``, ``txt_url``: a URL, data URL or base64)
    are fetched and ingested as knowledge-base documents (api/mem0/documents.py), one
    result each; an image message is a 422 (no vision model).

    ``custom_categories`` go in the memories' metadata (``custom_categories``), and
    extraction tags each memory with those it fits (its mem0 ``categories``) instead
    of the tenant's categories."""
    scope = entity_scope(body)
    _too_many(len(body.messages), services.settings.limits.batch_items)
    texts, parts = split_messages(body.messages)
    if not parts:
        return await _add_texts(body, texts, scope, caller, services)
    if not any(role != "system" for role, _ in texts):
        documents = await _add_documents(body, parts, scope, caller, services)
        return {"status": "SUCCEEDED", "event_id": None, "message": "ok", "results": documents}
    scope_owner(caller, scope)  # the texts' owner is refused before any document is read
    documents = await _add_documents(body, parts, scope, caller, services)
    out = await _add_texts(body, texts, scope, caller, services)
    return {**out, "results": documents + out["results"]}


async def _add_documents(
    body: m.AddRequest, parts: list[DocumentPart], scope: Scope, caller: Caller, services: Svc
) -> list[dict[str, Any]]:
    """Capped, authorised and charged before anything is fetched (a caller who may not
    write there, or one past its rate, costs the service no fetch); then every part is
    read (and refused) before anything is written, within the replica's byte budget, and
    the documents are written all or nothing (one transaction: a later one's refusal
    leaves none)."""
    cap = services.settings.fetch.max_document_parts
    if len(parts) > cap:
        raise ApiError(413, "payload_too_large", f"at most {cap} document parts in one add")
    meta = body.metadata
    planned = [document_input(caller, scope, p, b"", meta) for p in parts]
    services.documents.authorize(caller, planned)
    tenant = None if caller.role == "admin" else await services.tenants.effective(caller.tenant_id)
    user = planned[0].user_id  # one scope for the whole add
    services.auth.charge(caller, user, len(parts), tenant)  # a unit a document, up front
    async with services.fetcher.holding() as held:
        read = [await held.load(p.ref) for p in parts]
        docs = [
            document_input(caller, scope, p, r.data, meta) for p, r in zip(parts, read, strict=True)
        ]
        outs = await services.documents.ingest_many(
            caller, docs, charge=lambda units: services.auth.charge(caller, user, units, tenant)
        )
    return [added(part, out) for part, out in zip(parts, outs, strict=True)]


async def _add_texts(
    body: m.AddRequest, texts: list[tuple[str, str]], scope: Scope, caller: Caller, services: Svc
) -> dict[str, Any]:
    owner = scope_owner(caller, scope)
    categories = _validated(Guidance, custom_categories=body.custom_categories).custom_categories
    shared = owner.user_id is None
    common = {
        "agent_id": scope.agent_id,
        "session_id": scope.run_id,
        "metadata": {**(body.metadata or {}), META_CATEGORIES: categories}
        if categories
        else body.metadata,
        "scope": "agent" if shared else None,
    }
    if body.infer and not shared and services.sessions.inference_enabled:
        if not texts:
            raise bad("no message to store")
        text = texts[0][1] if len(texts) == 1 else "\n".join(f"{r}: {t}" for r, t in texts)
        fields = _validated(MemoryFields, content=text, infer=True, **common)
        wait_s = services.settings.extract.sync_wait_s
        job, outcome = await services.sessions.infer_now(owner, fields, wait_s)
        if outcome and outcome.get("error") is None and outcome.get("turns_extracted"):
            return {
                "status": "SUCCEEDED",
                "event_id": job["job_id"],
                "message": "ok",
                "results": [m.from_event(e) for e in outcome.get("events", [])],
            }
        return {"status": "PENDING", "event_id": job["job_id"], "message": QUEUED, "results": []}
    stored = [t for role, t in texts if role != "system"]
    if not stored:
        raise bad("no user or assistant message to store")
    items = [
        services.memories.new_memory(_validated(MemoryFields, content=t, **common), caller)
        for t in stored
    ]
    if body.expiration_date is not None:
        expires = datetime.combine(body.expiration_date, time.max, tzinfo=UTC)
        if expires <= datetime.now(UTC):
            raise ApiError(422, "invalid_request", "expiration_date is in the past")
        for item in items:
            item.expires_at = expires
    rows = await services.memories.add(owner, items, caller.actor)
    results = [
        {"id": r["id"], "event": "ADD", "memory": r["content"], "data": {"memory": r["content"]}}
        for r in rows
    ]
    return {"status": "SUCCEEDED", "event_id": None, "message": "ok", "results": results}


@router.post("/v3/memories/search/", response_model=m.Mem0SearchResults)
async def search(body: m.SearchRequest, caller: Caller, services: Svc):
    scope = entity_scope(body)
    scope.tags.extend(body.categories or [])
    owner = scope_owner(caller, scope)
    limits = services.settings.limits
    if body.top_k is not None and body.top_k > limits.top_k:
        raise ApiError(422, "invalid_request", f"top_k must be at most {limits.top_k}")
    try:
        check_content(body.query)
    except ValueError as exc:
        raise ApiError(422, "invalid_request", f"query: {exc}") from exc
    shared = f"@agent:{scope.agent_id}" if owner.user_id is None else None
    q = SearchQuery(
        tenant_id=owner.tenant_id,
        user_id=shared or owner.user_id,
        owners=(shared,) if shared else (),
        top_k=body.top_k or limits.default_top_k,
        threshold=body.threshold,
        tags=tuple(dict.fromkeys(scope.tags)),
        agent_id=None if shared else scope.agent_id,
        session_id=scope.run_id,
        metadata=scope.metadata,
        created_after=scope.created_after,
        created_before=scope.created_before,
        text=body.query,
        reference_date=body.reference_date,
    )
    step, outcome = await rerank_step(
        services, body.rerank or False, owner, body.query, lenient=True
    )
    wide = replace(q, top_k=max(q.top_k, step.pool)) if step is not None else q
    queries = [wide]
    if not shared and scope.run_id is None:  # a user's search: the org's (and agent's) knowledge
        knowledge = (f"@agent:{scope.agent_id}",) if scope.agent_id else ()
        queries.append(knowledge_query(wide, (*knowledge, "@org")))
    rows = await services.memories.search_knowledge(queries, q.top_k, rerank=step)
    return {"results": [m.to_mem0(r) for r in rows], "rerank": report(step, outcome)}


@router.post("/v3/memories/", response_model=m.Mem0Page)
async def get_all(
    request: Request,
    body: m.ListRequest,
    caller: Caller,
    services: Svc,
    page: int | None = Query(default=None, ge=1),
    page_size: int | None = Query(default=None, ge=1),
):
    """Newest first, ``page``/``page_size`` (query or body; default 1 and 100)."""
    scope = entity_scope(body)
    if scope.narrowed or body.start_date or body.end_date or body.categories:
        raise bad("get_all filters by user_id, agent_id and run_id; search takes the others")
    owner = scope_owner(caller, scope)
    number = page or body.page or 1
    size = page_size or body.page_size or 100
    if size > services.settings.limits.list_limit:
        raise bad(f"page_size must be at most {services.settings.limits.list_limit}")
    narrow = {"agent_id": scope.agent_id, "session_id": scope.run_id}
    rows, count = await services.directory.numbered_page(owner, number, size, narrow)

    def link(n: int) -> str:
        return str(request.url.include_query_params(page=n, page_size=size))

    return {
        "count": count,
        "next": link(number + 1) if number * size < count else None,
        "previous": link(number - 1) if number > 1 else None,
        "results": [m.to_mem0(r) for r in rows],
    }


@router.get("/v1/memories/{memory_id}/", response_model=m.Mem0Memory)
async def get(memory_id: UUID, caller: Caller, services: Svc):
    owner = await services.directory.owner_of(caller, memory_id)
    return m.to_mem0(await services.memories.get(owner, memory_id))


@router.put("/v1/memories/{memory_id}/", response_model=m.Mem0Memory)
async def update(memory_id: UUID, body: m.UpdateRequest, caller: Caller, services: Svc):
    if body.expiration_date is not None:
        raise bad("memserve does not change expiration_date after the add")
    owner = await services.directory.owner_of(caller, memory_id)
    patch = _validated(MemoryPatch, content=body.text, metadata=body.metadata)
    changes = patch.model_dump(exclude_none=True)
    if not changes:
        raise bad("nothing to update (text or metadata)")
    row = await services.memories.update(owner, memory_id, changes, caller.actor)
    return m.to_mem0(row)


@router.delete("/v1/memories/{memory_id}/", response_model=m.Message200)
async def delete(memory_id: UUID, caller: Caller, services: Svc):
    owner = await services.directory.owner_of(caller, memory_id)
    await services.memories.delete(owner, memory_id, caller.actor)
    return {"message": "Memory deleted successfully!"}


@router.get("/v1/memories/{memory_id}/history/", response_model=list[m.HistoryEntry])
async def history(memory_id: UUID, caller: Caller, services: Svc):
    owner = await services.directory.owner_of(caller, memory_id)
    limit = services.settings.limits.history_events
    events = await services.memories.history(owner, memory_id, limit)
    return [m.to_history(e, owner.user_id) for e in events]


@router.delete("/v1/memories/", response_model=m.Deleted)
async def delete_all(
    caller: Caller,
    services: Svc,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    app_id: str | None = None,
):
    """Forget the user (narrowed by agent_id/run_id when given), as ``DELETE /v1/memories``:
    memories, vectors, history, facts, turns and session state."""
    scope = Scope()
    for key, value in (
        ("user_id", user_id),
        ("agent_id", agent_id),
        ("run_id", run_id),
        ("app_id", app_id),
    ):
        scope.set_entity(key, value)
    owner = scope_owner(caller, scope)
    if owner.user_id is None:
        raise bad("name a user_id: shared agent memories are deleted by id")
    removed = await services.lifecycle.forget.forget(
        owner, agent_id=scope.agent_id, session_id=scope.run_id
    )
    return {"message": "Memories deleted successfully!", "deleted": removed["memories"]}


@router.put("/v1/batch/", response_model=m.Message200)
async def batch_update(body: m.BatchUpdate, caller: Caller, services: Svc):
    """All ids are checked first: one missing (or not the caller's) is a 404 that
    changes nothing."""
    _too_many(len(body.memories), services.settings.limits.batch_items)
    patches = [
        (i.memory_id, _validated(MemoryPatch, content=i.text, metadata=i.metadata))
        for i in body.memories
    ]
    owners = await services.directory.owners_of(caller, [i for i, _ in patches])
    for memory_id, patch in patches:
        changes = patch.model_dump(exclude_none=True)
        if changes:
            await services.memories.update(owners[memory_id], memory_id, changes, caller.actor)
    return {"message": f"Successfully updated {len(patches)} memories"}


@router.delete("/v1/batch/", response_model=m.Message200)
async def batch_delete(body: m.BatchDelete, caller: Caller, services: Svc):
    _too_many(len(body.memories), services.settings.limits.batch_items)
    ids = list(dict.fromkeys(i.memory_id for i in body.memories))
    owners = await services.directory.owners_of(caller, ids)
    for memory_id in ids:
        await services.memories.delete(owners[memory_id], memory_id, caller.actor)
    return {"message": f"Successfully deleted {len(ids)} memories"}
