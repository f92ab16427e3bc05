"""/v1/chat/completions: an OpenAI-compatible proxy that adds memory.

This module validates the OpenAI request and decides who and which session it is
for; ``ChatService`` (``serve_app.services.chat``) injects the context, calls the
upstream (``MEMSERVE_LLM_BASE_URL``, streaming or not) and records the turn.

Who: a user key's own user, or for a service key the OpenAI ``user`` field.
Caps (model allow-list, ``n``, ``max_tokens``, tools) are checked by the service
(``serve_app.services.chat_caps``), which also sends the token cap when the request
names no limit; ``GET /v1/chat/usage`` shows what a key spent (not-yet-written sums
included).
Session/agent: ``X-Memserve-Session`` / ``X-Memserve-Agent`` headers, or
``metadata.session_id`` / ``metadata.agent_id``; without one the turns go to
the session ``chat``. When the user said it: ``X-Memserve-Occurred-At`` or
``metadata.occurred_at`` (ISO 8601; default now), recorded with the turns.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import re2
from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.errors import ApiError
from serve_app.responses import UsageResponse, UsageRow
from serve_app.schemas import ErrorResponse, Identifier, at_most, said_time
from serve_app.schemas.memories import speaker_name
from serve_app.services.chat import ChatCall

router = APIRouter(prefix="/v1", tags=["chat"])
_ID = re2.compile(r"^[A-Za-z0-9_.:@\-]{1,128}$")


class ProxyMessage(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    @field_validator("content")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("content must not contain NUL characters")
        return value

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = self.content or []
        return "\n".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


class ChatCompletionRequest(BaseModel):
    """The OpenAI request; unknown fields are forwarded to the upstream untouched."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    model: str | None = Field(default=None, max_length=256)
    messages: list[ProxyMessage] = Field(min_length=1)
    stream: bool = False
    user: Identifier | None = None
    metadata: dict[str, str] | None = None

    _limit = field_validator("messages")(
        at_most("chat_messages", "at most {limit} messages", size=True)
    )


def _identifier(value: str | None, what: str) -> str | None:
    if value is not None and not _ID.match(value):
        raise ApiError(422, "invalid_request", f"{what} must match {_ID.pattern}")
    return value


def _said(value: str | None) -> datetime | None:
    """``occurred_at`` of the turns: ISO 8601, naive is UTC, not in the future."""
    if value is None:
        return None
    try:
        return said_time(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
    except ValueError as exc:
        raise ApiError(422, "invalid_request", f"occurred_at: {exc}") from None


@router.post(
    "/chat/completions",
    responses={
        200: {"content": {"text/event-stream": {}}},
        502: {"model": ErrorResponse, "description": "The upstream LLM failed"},
        504: {"model": ErrorResponse, "description": "The upstream LLM timed out"},
    },
)
async def chat_completions(
    body: ChatCompletionRequest,
    caller: Caller,
    services: Svc,
    x_memserve_session: Annotated[str | None, Header(max_length=128)] = None,
    x_memserve_agent: Annotated[str | None, Header(max_length=128)] = None,
    x_memserve_occurred_at: Annotated[str | None, Header(max_length=64)] = None,
) -> Any:
    if caller.role == "user" and body.user is not None and body.user != caller.user_id:
        raise ApiError(403, "forbidden", "a user key may only act for its own user")
    owner = resolve_owner(caller, None if caller.role == "user" else body.user)
    meta = dict(body.metadata or {})
    session = _identifier(x_memserve_session or meta.pop("session_id", None), "session id")
    agent = _identifier(x_memserve_agent or meta.pop("agent_id", None), "agent id")
    occurred_at = _said(x_memserve_occurred_at or meta.pop("occurred_at", None))
    users = [m for m in body.messages if m.role == "user"]
    payload = body.model_dump(exclude_none=True)
    if meta:
        payload["metadata"] = meta
    else:
        payload.pop("metadata", None)
    call = ChatCall(
        owner=owner,
        session_id=session,
        agent_id=agent,
        payload=payload,
        query=users[-1].text() if users else "",
        history=[(m.role, m.text()) for m in body.messages[:-1] if m.role in ("user", "assistant")],
        stream=body.stream,
        key_id="" if caller.via_token else caller.key_id,  # use is counted per API key
        occurred_at=occurred_at,
        speaker=speaker_name((users[-1].model_extra or {}).get("name")) if users else None,
    )
    answer = await services.chat.complete(call)
    if answer.stream is not None:
        return StreamingResponse(
            answer.stream, media_type="text/event-stream", headers=answer.headers
        )
    return JSONResponse(answer.body, headers=answer.headers)


@router.get("/chat/usage", response_model=UsageResponse)
async def chat_usage(caller: Caller, services: Svc) -> UsageResponse:
    """The chat proxy's use per day: the calling key's, or every key of the tenant (admin)."""
    if caller.via_token:  # a token has no key to count against
        return UsageResponse(usage=[])
    key_id = None if caller.role == "admin" else caller.key_id
    rows = await services.chat.usage.report(caller.tenant_id, key_id)
    return UsageResponse(usage=[UsageRow(**r) for r in rows])
