"""/v1/memories: create, read, list, update, delete, delete by scope, history."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import JSONResponse

from serve_app.api.deps import Caller, Svc, page_limit
from serve_app.auth import resolve_owner
from serve_app.errors import ApiError
from serve_app.responses import QueuedJob
from serve_app.schemas import (
    MAX_ROW_VERSION,
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
    event_time,
)
from serve_app.services.memories import read_owner, write_owner

router = APIRouter(prefix="/v1/memories", tags=["memories"])
UserQuery = Annotated[Identifier | None, Query(description="required with a service key")]


@router.post(
    "",
    status_code=201,
    response_model=Memory,
    responses={202: {"model": QueuedJob, "description": "infer: true: queued for extraction"}},
)
async def create_memory(body: MemoryCreate, caller: Caller, services: Svc):
    """201 with the memory; with ``infer: true`` (and an LLM configured) 202
    ``{"status": "queued", "job_id"}``: the content goes through extraction
    (``GET /v1/sessions/{job_id}`` shows progress). Without an LLM, ``infer`` is
    stored verbatim (201), never fake-extracted."""
    items = [services.memories.new_memory(body, caller)]
    owner = write_owner(caller, body.user_id, items)
    no_inferred_supersedes([body])
    if body.infer and owner.user_id is not None and services.sessions.inference_enabled:
        job = await services.sessions.queue_inference(owner, body)
        return JSONResponse(job, status_code=202)
    rows = await services.memories.add(owner, items, caller.actor)
    return rows[0]


@router.post("/batch", status_code=201, response_model=MemoryBatch)
async def create_memories(body: MemoryBatchCreate, caller: Caller, services: Svc):
    items = [services.memories.new_memory(i, caller) for i in body.items]
    owner = write_owner(caller, body.user_id, items)
    no_inferred_supersedes(body.items)
    infer = owner.user_id is not None and services.sessions.inference_enabled
    if infer and any(i.infer for i in body.items):
        # infer items become extraction jobs (listed in "jobs"); the others are stored.
        jobs = [await services.sessions.queue_inference(owner, f) for f in body.items if f.infer]
        plain = [n for n, f in zip(items, body.items, strict=True) if not f.infer]
        rows = await services.memories.add(owner, plain, caller.actor)
        payload = MemoryBatch(memories=rows).model_dump(mode="json")
        return JSONResponse({**payload, "jobs": jobs}, status_code=201)
    rows = await services.memories.add(owner, items, caller.actor)
    return {"memories": rows}


def no_inferred_supersedes(items: list[MemoryFields]) -> None:
    """``supersedes`` retires memories now, in the add's transaction: an ``infer`` item
    is written later by extraction (which decides what it replaces itself)."""
    if any(f.infer and f.supersedes for f in items):
        raise ApiError(422, "invalid_request", "supersedes needs infer: false")


@router.get("", response_model=MemoryList)
async def list_memories(
    caller: Caller,
    services: Svc,
    user_id: UserQuery = None,
    type: MemoryType | None = None,
    agent_id: Identifier | None = None,
    session_id: Identifier | None = None,
    limit: Annotated[int, Query(ge=1)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    status: Literal["active", "archived"] | None = None,
    as_of: Annotated[datetime | None, Query(description="what was valid then")] = None,
    include_invalidated: bool = False,
):
    """Newest first; memories valid now unless ``as_of`` (valid then) or
    ``include_invalidated`` (retired ones too)."""
    owner = read_owner(caller, user_id)
    page_limit(limit, services)
    rows, next_cursor = await services.memories.list(
        owner,
        limit=limit,
        cursor=cursor,
        type=type.value if type else None,
        agent_id=agent_id,
        session_id=session_id,
        status=status,
        as_of=event_time(as_of),
        include_invalidated=include_invalidated,
    )
    return {"memories": rows, "next_cursor": next_cursor}


@router.delete("", response_model=DeletedCount)
async def delete_memories(
    caller: Caller,
    services: Svc,
    user_id: UserQuery = None,
    agent_id: Identifier | None = None,
    session_id: Identifier | None = None,
):
    """Forget the user (or one agent/session of theirs): memories, vectors, history, facts,
    turns and session state; ``removed`` counts each kind (``deleted``: memories)."""
    owner = resolve_owner(caller, user_id)
    removed = await services.lifecycle.forget.forget(
        owner, agent_id=agent_id, session_id=session_id
    )
    return {"deleted": removed["memories"], "removed": removed}


@router.get("/{memory_id}", response_model=Memory)
async def get_memory(memory_id: UUID, caller: Caller, services: Svc, user_id: UserQuery = None):
    return await services.memories.get(read_owner(caller, user_id), memory_id)


@router.patch("/{memory_id}", response_model=Memory)
async def update_memory(
    memory_id: UUID,
    body: MemoryPatch,
    caller: Caller,
    services: Svc,
    user_id: UserQuery = None,
    if_match: Annotated[str | None, Header()] = None,
):
    owner = read_owner(caller, user_id)
    changes = body.model_dump(exclude_unset=True)
    expected = parse_if_match(if_match, changes.pop("version", None))
    if any(v is None for k, v in changes.items() if k not in ("valid_until", "pinned")):
        raise ApiError(422, "invalid_request", "fields may be omitted but not null")
    if not changes:
        raise ApiError(422, "invalid_request", "nothing to update")
    if "type" in changes:
        changes["type"] = changes["type"].value
    return await services.memories.update(
        owner, memory_id, changes, caller.actor, expected_version=expected
    )


def parse_if_match(header: str | None, body_version: int | None) -> int | None:
    """The row version a PATCH is conditional on: ``If-Match: "3"`` (or W/"3", 3) or
    the body's ``version``; both given must agree."""
    if header is None or header.strip() == "*":
        return body_version
    raw = header.strip().removeprefix("W/").strip('"')
    # ASCII digits only: str.isdigit() also takes "²" (int() refuses it) and "١٢".
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_ROW_VERSION:
        raise ApiError(422, "invalid_request", "If-Match must be a memory version")
    if body_version is not None and body_version != int(raw):
        raise ApiError(422, "invalid_request", "If-Match and version disagree")
    return int(raw)


@router.delete("/{memory_id}", status_code=204)
async def delete_memory(memory_id: UUID, caller: Caller, services: Svc, user_id: UserQuery = None):
    await services.memories.delete(read_owner(caller, user_id), memory_id, caller.actor)
    return Response(status_code=204)


@router.get("/{memory_id}/history", response_model=HistoryResponse)
async def memory_history(memory_id: UUID, caller: Caller, services: Svc, user_id: UserQuery = None):
    owner = read_owner(caller, user_id)
    limit = services.settings.limits.history_events
    events = await services.memories.history(owner, memory_id, limit)
    row = await services.memories.get(owner, memory_id)  # the chain: what it replaced, by what
    return {
        "events": events,
        "supersedes": row["supersedes"],
        "superseded_by": row["superseded_by"],
    }
