"""/v1/memories: create, read, list, update, delete, delete by scope, history."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response

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
from serve_app.store import NewMemory
from serve_app.store.memories import InvalidCursor

router = APIRouter(prefix="/v1/memories", tags=["memories"])
Caller = Annotated[Principal, Depends(principal)]
UserQuery = Annotated[Identifier | None, Query(description="required with a service key")]


def to_new_memory(f: MemoryFields) -> NewMemory:
    scope = f.scope or ("session" if f.session_id else "user")
    if scope not in ("user", "session"):
        raise ApiError(403, "forbidden", "only user and session memories can be written here")
    return NewMemory(
        content=f.content,
        type=f.type.value,
        scope=scope,
        agent_id=f.agent_id,
        session_id=f.session_id,
        tags=f.tags or [],
        metadata=f.metadata or {},
        importance=0.5 if f.importance is None else f.importance,
    )


@router.post("", status_code=201, response_model=Memory)
async def create_memory(body: MemoryCreate, request: Request, caller: Caller):
    owner = resolve_owner(caller, body.user_id)
    rows = await current().service.add(owner, [to_new_memory(body)], caller.actor)
    return rows[0]


@router.post("/batch", status_code=201, response_model=MemoryBatch)
async def create_memories(body: MemoryBatchCreate, request: Request, caller: Caller):
    owner = resolve_owner(caller, body.user_id)
    items = [to_new_memory(i) for i in body.items]
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
    owner = resolve_owner(caller, user_id)
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
    return await current().service.get(resolve_owner(caller, user_id), memory_id)


@router.patch("/{memory_id}", response_model=Memory)
async def update_memory(
    memory_id: UUID, body: MemoryPatch, request: Request, caller: Caller, user_id: UserQuery = None
):
    owner = resolve_owner(caller, user_id)
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
    await current().service.delete(resolve_owner(caller, user_id), memory_id, caller.actor)
    return Response(status_code=204)


@router.get("/{memory_id}/history", response_model=HistoryResponse)
async def memory_history(
    memory_id: UUID, request: Request, caller: Caller, user_id: UserQuery = None
):
    owner = resolve_owner(caller, user_id)
    return {"events": await current().service.history(owner, memory_id)}
