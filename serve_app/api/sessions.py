"""/v1/sessions: the short-term buffer and the extraction triggers.

``POST /v1/sessions/{sid}/turns`` appends to the session's buffer (PostgreSQL,
one transaction) and answers 202 at once; every N user turns it fires (and
forgets) a call to the extractor deployment. ``POST .../end`` marks the session
ended and fires a full extraction + episodic summary. The buffer is the durable
queue: if a trigger is lost, the extractor's periodic scan finds the turns.

Without an LLM (``MEMSERVE_LLM_BASE_URL`` unset) every user turn is handed to
the extractor, which stores it verbatim as a searchable ``episodic`` memory
(``source: "turn"``); nothing is "extracted".
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from serve_app.api.deps import principal
from serve_app.api.state import current
from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.extraction.turns import SessionKey, TurnStore
from serve_app.schemas import Identifier, MemoryFields, StrictModel, _check_content, at_most
from serve_app.store.records import Owner

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
Caller = Annotated[Principal, Depends(principal)]
SessionId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@\-]+$")]


class Message(StrictModel):
    role: Literal["user", "assistant", "system", "tool"]
    content: str

    _content = field_validator("content")(_check_content)


class TurnsRequest(StrictModel):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    messages: list[Message] = Field(min_length=1)

    _limit = field_validator("messages")(
        at_most("max_batch_items", "at most {limit} messages per call", size=True)
    )


class EndRequest(StrictModel):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None


class TurnsAccepted(BaseModel):
    session_id: str
    accepted: int
    turn_range: list[int]
    extraction: str  # scheduled | buffered | raw (no LLM: stored as episodic turns)


class SessionEnded(BaseModel):
    session_id: str
    pending_turns: int
    extraction: str


class SessionStatus(BaseModel):
    session_id: str
    turns: int
    pending_turns: int
    failed_turns: int
    compressed_turns: int
    ended: bool


def turn_store() -> TurnStore:
    state = current()
    store = state.extras.get("turns")
    if store is None:
        store = state.extras["turns"] = TurnStore(state.pool)
    return store


def trigger() -> ExtractionTrigger | None:
    return current().extras.get("extraction")


def _state(t: ExtractionTrigger | None, fired: bool) -> str:
    if t is None:
        return "buffered"
    if not t.enabled:
        return "raw"
    return "scheduled" if fired else "buffered"


async def record_turns(
    owner: Owner, session_id: str, agent_id: str | None, messages: list[tuple[str, str]]
) -> tuple[list[int], str]:
    """Append turns and fire extraction when due; (turn range, extraction state).

    Also installed as ``extras["turn_recorder"]`` so the chat proxy records turns
    exactly like this route does.
    """
    key = SessionKey(owner.tenant_id, owner.user_id, session_id)
    appended = await turn_store().append(
        key, messages, agent_id=agent_id, ttl_hours=current().settings.session_turn_ttl_hours
    )
    t = trigger()
    fired = t is not None and t.due(appended.pending_user_turns)
    if fired:
        t.fire(key)
    return [appended.first_index, appended.last_index], _state(t, fired)


@router.post("/{session_id}/turns", status_code=202, response_model=TurnsAccepted)
async def append_turns(session_id: SessionId, body: TurnsRequest, caller: Caller):
    if session_id.startswith(INFER_PREFIX):
        reserved = f"session ids starting with {INFER_PREFIX!r} are reserved"
        raise ApiError(422, "invalid_request", reserved)
    owner = resolve_owner(caller, body.user_id)
    turn_range, extraction = await record_turns(
        owner, session_id, body.agent_id, [(m.role, m.content) for m in body.messages]
    )
    return {
        "session_id": session_id,
        "accepted": len(body.messages),
        "turn_range": turn_range,
        "extraction": extraction,
    }


@router.post("/{session_id}/end", status_code=202, response_model=SessionEnded)
async def end_session(session_id: SessionId, body: EndRequest, caller: Caller):
    owner = resolve_owner(caller, body.user_id)
    key = SessionKey(owner.tenant_id, owner.user_id, session_id)
    pending = await turn_store().end(key, body.agent_id)
    t = trigger()
    if t is not None:
        t.fire(key, force=True)
    return {"session_id": session_id, "pending_turns": pending, "extraction": _state(t, True)}


@router.get("/{session_id}", response_model=SessionStatus)
async def session_status(
    session_id: SessionId, caller: Caller, user_id: Annotated[Identifier | None, Query()] = None
):
    """Where the session's turns stand in extraction (also the status of an infer job)."""
    owner = resolve_owner(caller, user_id)
    async with current().pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS turns,"
            " count(*) FILTER (WHERE extracted_at IS NULL) AS pending,"
            " count(*) FILTER (WHERE extract_error IS NOT NULL) AS failed,"
            " count(*) FILTER (WHERE compressed_at IS NOT NULL) AS compressed"
            " FROM session_turns WHERE tenant_id = %s AND user_id = %s AND session_id = %s",
            (owner.tenant_id, owner.user_id, session_id),
        )
        row = await cur.fetchone()
    if not row["turns"]:
        raise ApiError(404, "not_found", "session not found")
    ended = await turn_store().is_ended(SessionKey(owner.tenant_id, owner.user_id, session_id))
    return {
        "session_id": session_id,
        "turns": row["turns"],
        "pending_turns": row["pending"],
        "failed_turns": row["failed"],
        "compressed_turns": row["compressed"],
        "ended": ended,
    }


async def queue_inference(owner: Owner, item: MemoryFields) -> dict[str, Any]:
    """``infer: true``: the content goes through extraction as a one-turn job.

    The job is a session of its own (``infer-<hex>``) in the durable buffer, so
    it survives LLM outages like any turn; its status is
    ``GET /v1/sessions/{job_id}``. Memories it yields carry the caller's
    session_id, agent_id, tags and metadata.
    """
    job = f"{INFER_PREFIX}{uuid.uuid4().hex[:16]}"
    key = SessionKey(owner.tenant_id, owner.user_id, job)
    meta = {
        "session_id": item.session_id,
        "tags": item.tags or [],
        "metadata": item.metadata or {},
        "type_hint": item.type.value,
    }
    store = turn_store()
    await store.append(
        key,
        [("user", item.content)],
        agent_id=item.agent_id,
        ttl_hours=current().settings.session_turn_ttl_hours,
        meta=meta,
    )
    await store.end(key, item.agent_id)
    t = trigger()
    if t is not None:
        t.fire(key, force=True)
    return {"status": "queued", "job_id": job}


def inference_enabled() -> bool:
    t = trigger()
    return t is not None and t.enabled


def accepted(body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=202)
