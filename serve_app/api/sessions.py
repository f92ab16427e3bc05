"""/v1/sessions: the short-term buffer and the extraction triggers.

``POST /v1/sessions/{sid}/turns`` appends to the session's buffer and answers
202 at once; ``POST .../end`` marks the session ended and fires a full
extraction + episodic summary. The work is ``SessionService``'s
(``serve_app.services.sessions``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import Field, field_validator, model_validator

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.responses import SessionEnded, SessionStatus, TurnsAccepted
from serve_app.schemas import (
    Identifier,
    SpeakerName,
    StrictModel,
    at_most,
    check_content,
    said_time,
)
from serve_app.services.sessions import Speaker

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
SessionId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@\-]+$")]


class Message(StrictModel):
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    # When it was said (ISO 8601; naive: UTC; at most a day ahead); default: now. The
    # extraction prompt shows it so "last Tuesday" becomes a date.
    occurred_at: datetime | None = None
    # Who said it (OpenAI's field): the extraction prompt shows each speaker, so what
    # someone else says is not taken for the user's own words.
    name: SpeakerName | None = None
    # The tenant's user who said it (a group session): what they say about themselves
    # goes to their own memory; the key must be allowed to act for them.
    speaker_id: Identifier | None = None

    _content = field_validator("content")(check_content)
    _occurred_at = field_validator("occurred_at")(said_time)

    @model_validator(mode="after")
    def _speaker_says_user(self) -> Message:
        if self.speaker_id is not None and self.role != "user":
            raise ValueError("speaker_id is for user messages (a platform user who spoke)")
        return self


class TurnsRequest(StrictModel):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    messages: list[Message] = Field(min_length=1)

    _limit = field_validator("messages")(
        at_most("batch_items", "at most {limit} messages per call", size=True)
    )


class EndRequest(StrictModel):
    user_id: Identifier | None = None
    agent_id: Identifier | None = None


@router.post("/{session_id}/turns", status_code=202, response_model=TurnsAccepted)
async def append_turns(session_id: SessionId, body: TurnsRequest, caller: Caller, services: Svc):
    owner = resolve_owner(caller, body.user_id)
    for speaker in {m.speaker_id for m in body.messages} - {None, owner.user_id}:
        resolve_owner(caller, speaker)  # a user key speaks only for itself: 403
    turn_range, extraction = await services.sessions.record(
        owner,
        session_id,
        body.agent_id,
        [(m.role, m.content) for m in body.messages],
        occurred_at=[m.occurred_at for m in body.messages],
        speakers=[Speaker(m.name, m.speaker_id) for m in body.messages],
    )
    return {
        "session_id": session_id,
        "accepted": len(body.messages),
        "turn_range": turn_range,
        "extraction": extraction,
    }


@router.post("/{session_id}/end", status_code=202, response_model=SessionEnded)
async def end_session(session_id: SessionId, body: EndRequest, caller: Caller, services: Svc):
    owner = resolve_owner(caller, body.user_id)
    pending, extraction = await services.sessions.end(owner, session_id, body.agent_id)
    return {"session_id": session_id, "pending_turns": pending, "extraction": extraction}


@router.get("/{session_id}", response_model=SessionStatus)
async def session_status(
    session_id: SessionId,
    caller: Caller,
    services: Svc,
    user_id: Annotated[Identifier | None, Query()] = None,
):
    """Where the session's turns stand in extraction (also the status of an infer job)."""
    return await services.sessions.status(resolve_owner(caller, user_id), session_id)
