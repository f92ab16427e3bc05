"""/v1/chat/completions: an OpenAI-compatible proxy that adds memory.

The request goes to the configured upstream (MEMSERVE_LLM_BASE_URL) with the
user's context block injected as a system message (wrapped with
``wrap_context`` so extraction never re-extracts it); after the answer, the
user's last message and the answer are recorded as session turns for
extraction, in the background. Streaming (SSE) is passed through as it comes.

Who: a user key's own user, or for a service key the OpenAI ``user`` field.
Session/agent: ``X-Memserve-Session`` / ``X-Memserve-Agent`` headers, or
``metadata.session_id`` / ``metadata.agent_id``; without one the turns go to
the session ``chat``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Header
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from serve_app.api.context import build_context
from serve_app.api.deps import principal
from serve_app.api.state import AppState, current
from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.schemas import ErrorResponse, Identifier, at_most
from serve_app.store.records import Owner

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["chat"])
DEFAULT_SESSION = "chat"
_ID = re.compile(r"^[A-Za-z0-9_.:@\-]{1,128}$")
_background: set[asyncio.Task] = set()

# Records (owner, session, agent, [(role, content)]) as session turns; installed by the
# sessions API (the same function its turns route uses), see ``turn_recorder``.
TurnRecorder = Callable[[Owner, str, str | None, list[tuple[str, str]]], Awaitable[Any]]


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
        at_most("max_chat_messages", "at most {limit} messages", size=True)
    )


def _identifier(value: str | None, what: str) -> str | None:
    if value is not None and not _ID.match(value):
        raise ApiError(422, "invalid_request", f"{what} must match {_ID.pattern}")
    return value


def http_client(state: AppState) -> httpx.AsyncClient:
    client = state.extras.get("chat_http")
    if client is None:
        timeout = httpx.Timeout(state.settings.chat_timeout_s, connect=5.0)
        client = httpx.AsyncClient(timeout=timeout)
        state.extras["chat_http"] = client
    return client


def inject(messages: list[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """The context as a system message right after the caller's leading system messages."""
    if not block:
        return messages
    i = 0
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        i += 1
    return [*messages[:i], {"role": "system", "content": block}, *messages[i:]]


def turn_recorder(state: AppState) -> TurnRecorder:
    """The sessions API's recorder (the same function its turns route uses)."""
    record = state.extras.get("turn_recorder")
    if record is None:
        from serve_app.api.sessions import record_turns

        record = record_turns
    return record


def _record_later(
    state: AppState, owner: Owner, session: str, agent: str | None, turn: list[tuple[str, str]]
) -> None:
    record = turn_recorder(state)
    if not all(content.strip() for _, content in turn):
        return
    limit = state.settings.max_content_chars
    turn = [(role, content[:limit]) for role, content in turn]

    async def run() -> None:
        try:
            await record(owner, session, agent, turn)
        except Exception:  # never surfaces in the chat path; the answer is already sent
            log.warning("recording a chat turn failed", exc_info=True)

    task = asyncio.create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)


def _upstream_error(status: int, body: bytes) -> JSONResponse:
    try:
        message = json.loads(body)["error"]["message"]
    except Exception:
        message = body[:200].decode(errors="replace")
    if 400 <= status < 500 and status not in (401, 403):
        return JSONResponse(
            {"error": {"code": "upstream_rejected", "message": str(message)}}, status_code=status
        )
    return JSONResponse(
        {"error": {"code": "upstream_error", "message": f"upstream LLM answered {status}"}},
        status_code=502,
    )


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
    caller: Annotated[Principal, Depends(principal)],
    x_memserve_session: Annotated[str | None, Header(max_length=128)] = None,
    x_memserve_agent: Annotated[str | None, Header(max_length=128)] = None,
) -> Any:
    state = current()
    s = state.settings
    if caller.role == "user" and body.user is not None and body.user != caller.user_id:
        raise ApiError(403, "forbidden", "a user key may only act for its own user")
    owner = resolve_owner(caller, None if caller.role == "user" else body.user)
    meta = dict(body.metadata or {})
    session = _identifier(x_memserve_session or meta.pop("session_id", None), "session id")
    agent = _identifier(x_memserve_agent or meta.pop("agent_id", None), "agent id")
    if not s.llm_base_url:
        raise ApiError(503, "unavailable", "no upstream LLM is configured (MEMSERVE_LLM_BASE_URL)")

    users = [m for m in body.messages if m.role == "user"]
    query = users[-1].text() if users else ""
    history = [(m.role, m.text()) for m in body.messages[:-1] if m.role in ("user", "assistant")]
    block, n_memories = "", 0
    if query.strip():
        try:
            result = await build_context(
                caller,
                owner.user_id,
                query[: s.max_content_chars],
                session_id=session,
                agent_id=agent,
                history=history[-s.max_history_items :],
            )
            block, n_memories = result.context, len(result.memories)
        except ApiError:
            raise
        except Exception:  # memory is an enhancement: answer without it rather than fail
            log.warning("context for the chat proxy failed; answering without it", exc_info=True)

    payload = body.model_dump(exclude_none=True)
    payload["messages"] = inject(payload["messages"], block)
    payload["model"] = body.model or s.llm_model
    if meta:
        payload["metadata"] = meta
    else:
        payload.pop("metadata", None)
    url = s.llm_base_url.rstrip("/") + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    if s.llm_api_key:
        headers["Authorization"] = f"Bearer {s.llm_api_key}"
    extra = {"X-Memserve-Context-Memories": str(n_memories)}
    client = http_client(state)
    turn_session = session or DEFAULT_SESSION

    def record(answer: str) -> None:
        _record_later(state, owner, turn_session, agent, [("user", query), ("assistant", answer)])

    try:
        if not body.stream:
            r = await client.post(url, json=payload, headers=headers)
            if r.status_code != 200:
                return _upstream_error(r.status_code, r.content)
            answer = r.json()
            try:
                record(answer["choices"][0]["message"].get("content") or "")
            except (KeyError, IndexError, TypeError, AttributeError):
                log.warning("upstream answer without choices[0].message")
            return JSONResponse(answer, headers=extra)
        request = client.build_request("POST", url, json=payload, headers=headers)
        upstream = await client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise ApiError(504, "upstream_timeout", "the upstream LLM did not answer in time") from exc
    except (httpx.HTTPError, ValueError) as exc:
        raise ApiError(502, "upstream_error", f"upstream LLM failed: {type(exc).__name__}") from exc
    if upstream.status_code != 200:
        content = await upstream.aread()
        await upstream.aclose()
        return _upstream_error(upstream.status_code, content)
    if upstream.headers.get("content-type", "").startswith("application/json"):
        # An upstream that ignores `stream`: answer as one SSE chunk so clients still stream.
        answer = json.loads(await upstream.aread())
        await upstream.aclose()
        return StreamingResponse(
            _as_sse(answer, record), media_type="text/event-stream", headers=extra
        )
    return StreamingResponse(
        _relay(upstream, record), media_type="text/event-stream", headers=extra
    )


async def _as_sse(answer: dict[str, Any], record: Callable[[str], None]) -> AsyncIterator[bytes]:
    """A complete chat.completion as chat.completion.chunk events."""
    try:
        content = answer["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        content = ""
    base = {k: answer.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    first = {"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}
    last = {"index": 0, "delta": {}, "finish_reason": "stop"}
    for choice in (first, last):
        yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()
    yield b"data: [DONE]\n\n"
    record(content)


async def _relay(upstream: httpx.Response, record: Callable[[str], None]) -> AsyncIterator[bytes]:
    """Pass SSE lines through as they arrive, collecting the answer's text deltas."""
    parts: list[str] = []
    done = False
    try:
        async for line in upstream.aiter_lines():
            yield (line + "\n").encode()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            try:
                delta = json.loads(data)["choices"][0].get("delta") or {}
                parts.append(delta.get("content") or "")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
    except httpx.HTTPError:
        log.warning("upstream stream broke off", exc_info=True)
    finally:
        await upstream.aclose()
    if done or parts:
        record("".join(parts))
