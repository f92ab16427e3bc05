"""/v1/memories: create, read, list, update, delete, delete by scope, history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from serve_app.api import sessions
from serve_app.api.deps import principal
from serve_app.api.state import current
from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.schemas import (
    DeletedCount,
    HistoryResponse,
    Identifier,
    Memory,
    MemoryBatch,
    MemoryBatchCreate,
    MemoryCreate,
    MemoryFields,
    MemoryList,
    MemoryPatch,
    MemoryType,
)
from serve_app.store import NewMemory, Owner
from serve_app.store.memories import InvalidCursor

router = APIRouter(prefix="/v1/memories", tags=["memories"])
Caller = Annotated[Principal, Depends(principal)]
UserQuery = Annotated[Identifier | None, Query(description="required with a service key")]


SHARED_SCOPES = ("agent", "org")
SHARED_WRITERS = ("service", "admin")


def to_new_memory(f: MemoryFields, caller: Principal | None = None) -> NewMemory:
    """Validate the scope: agent/org memories are shared knowledge, written by service keys."""
    scope = f.scope or ("session" if f.session_id else "user")
    if scope in SHARED_SCOPES and (caller is None or caller.role not in SHARED_WRITERS):
        raise ApiError(403, "forbidden", "agent and org memories are written by service keys only")
    if scope == "agent" and not f.agent_id:
        raise ApiError(422, "invalid_request", "an agent memory needs agent_id")
    if scope == "session" and not f.session_id:
        raise ApiError(422, "invalid_request", "a session memory needs session_id")
    expires_at = None
    ttl = current().settings.session_ttl_s
    if scope == "session" and ttl > 0:
        expires_at = datetime.now(UTC) + timedelta(seconds=ttl)
    return NewMemory(
        content=f.content,
        type=f.type.value,
        scope=scope,
        agent_id=f.agent_id,
        session_id=f.session_id,
        tags=f.tags or [],
        metadata=f.metadata or {},
        importance=0.5 if f.importance is None else f.importance,
        expires_at=expires_at,
    )


def write_owner(caller: Principal, user_id: str | None, items: list[NewMemory]) -> Owner:
    """Only shared items: the tenant (no user needed); otherwise the named/bound user."""
    if all(i.scope in SHARED_SCOPES for i in items):
        return Owner(caller.tenant_id, None)
    return resolve_owner(caller, user_id)


def read_owner(caller: Principal, user_id: str | None) -> Owner:
    """By-id routes: a service key naming no user acts on the tenant's shared memories."""
    if user_id is None and caller.role in SHARED_WRITERS:
        return Owner(caller.tenant_id, None)
    return resolve_owner(caller, user_id)


QUEUED_SCHEMA = {
    "type": "object",
    "properties": {"status": {"type": "string"}, "job_id": {"type": "string"}},
    "required": ["status", "job_id"],
}


@router.post(
    "",
    status_code=201,
    response_model=Memory,
    responses={
        202: {
            "description": "infer: true: queued for extraction",
            "content": {"application/json": {"schema": QUEUED_SCHEMA}},
        }
    },
)
async def create_memory(body: MemoryCreate, request: Request, caller: Caller):
    """201 with the memory; with ``infer: true`` (and an LLM configured) 202
    ``{"status": "queued", "job_id"}``: the content goes through extraction
    (``GET /v1/sessions/{job_id}`` shows progress). Without an LLM, ``infer`` is
    stored verbatim (201), never fake-extracted."""
    items = [to_new_memory(body, caller)]
    owner = write_owner(caller, body.user_id, items)
    if body.infer and owner.user_id is not None and sessions.inference_enabled():
        return sessions.accepted(await sessions.queue_inference(owner, body))
    rows = await current().service.add(owner, items, caller.actor)
    return rows[0]


@router.post("/batch", status_code=201, response_model=MemoryBatch)
async def create_memories(body: MemoryBatchCreate, request: Request, caller: Caller):
    items = [to_new_memory(i, caller) for i in body.items]
    owner = write_owner(caller, body.user_id, items)
    if (
        owner.user_id is not None
        and sessions.inference_enabled()
        and any(i.infer for i in body.items)
    ):
        # infer items become extraction jobs (listed in "jobs"); the others are stored.
        jobs = [await sessions.queue_inference(owner, f) for f in body.items if f.infer]
        plain = [n for n, f in zip(items, body.items, strict=True) if not f.infer]
        rows = await current().service.add(owner, plain, caller.actor) if plain else []
        payload = MemoryBatch(memories=rows).model_dump(mode="json")
        return JSONResponse({**payload, "jobs": jobs}, status_code=201)
    rows = await current().service.add(owner, items, caller.actor)
    return {"memories": rows}


@router.get("", response_model=MemoryList)
async def list_memories(
    request: Request,
    caller: Caller,
    user_id: UserQuery = None,
    type: MemoryType | None = None,
    agent_id: Identifier | None = None,
    session_id: Identifier | None = None,
    limit: Annotated[int, Query(ge=1)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
):
    owner = read_owner(caller, user_id)
    max_limit = current().settings.max_list_limit
    if limit > max_limit:
        raise ApiError(422, "invalid_request", f"limit must be at most {max_limit}")
    try:
        rows, next_cursor = await current().service.store.list(
            owner,
            limit=limit,
            cursor=cursor,
            type=type.value if type else None,
            agent_id=agent_id,
            session_id=session_id,
        )
    except InvalidCursor as exc:
        raise ApiError(400, "invalid_request", "invalid cursor") from exc
    return {"memories": rows, "next_cursor": next_cursor}


@router.delete("", response_model=DeletedCount)
async def delete_memories(
    request: Request,
    caller: Caller,
    user_id: UserQuery = None,
    agent_id: Identifier | None = None,
    session_id: Identifier | None = None,
):
    owner = resolve_owner(caller, user_id)
    n = await current().service.store.delete_scope(
        owner, agent_id=agent_id, session_id=session_id, actor=caller.actor
    )
    return {"deleted": n}


@router.get("/{memory_id}", response_model=Memory)
async def get_memory(memory_id: UUID, request: Request, caller: Caller, user_id: UserQuery = None):
    return await current().service.get(read_owner(caller, user_id), memory_id)


@router.patch("/{memory_id}", response_model=Memory)
async def update_memory(
    memory_id: UUID, body: MemoryPatch, request: Request, caller: Caller, user_id: UserQuery = None
):
    owner = read_owner(caller, user_id)
    changes = body.model_dump(exclude_unset=True)
    if any(v is None for v in changes.values()):
        raise ApiError(422, "invalid_request", "fields may be omitted but not null")
    if not changes:
        raise ApiError(422, "invalid_request", "nothing to update")
    if "type" in changes:
        changes["type"] = changes["type"].value
    return await current().service.update(owner, memory_id, changes, caller.actor)


@router.delete("/{memory_id}", status_code=204)
async def delete_memory(
    memory_id: UUID, request: Request, caller: Caller, user_id: UserQuery = None
):
    await current().service.delete(read_owner(caller, user_id), memory_id, caller.actor)
    return Response(status_code=204)


@router.get("/{memory_id}/history", response_model=HistoryResponse)
async def memory_history(
    memory_id: UUID, request: Request, caller: Caller, user_id: UserQuery = None
):
    owner = read_owner(caller, user_id)
    return {"events": await current().service.history(owner, memory_id)}
