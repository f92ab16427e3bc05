"""The OpenAI-compatible chat proxy's work: inject memory, call the upstream, record the turn.

The user's context block goes in as a system message (wrapped by the context
formatter so extraction never re-extracts it); after the answer, the user's last
message and the answer are recorded as session turns in the background. Streaming
(SSE) is passed through as it comes. The upstream HTTP client is opened once per
replica and closed with the services.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg

from serve_app.errors import ApiError
from serve_app.services.chat_caps import TOKEN_FIELDS, allowed_models, check_caps
from serve_app.services.chat_usage import ChatUsageMeter
from serve_app.services.context import ContextService
from serve_app.services.sessions import SessionService, Speaker
from serve_app.settings import ChatSettings, LimitSettings, LLMSettings, SpendSettings
from serve_app.spend.estimate import estimated_usage, request_tokens, usage_of
from serve_app.spend.meter import SpendMeter, Ticket
from serve_app.store import Owner
from serve_app.store.chat_usage import Usage
from serve_app.store.llm_spend import CallTag, OverBudget, Spent

log = logging.getLogger(__name__)
DEFAULT_SESSION = "chat"


@dataclass(frozen=True)
class ChatCall:
    """One proxied request: who, where the turns go, and the OpenAI payload to forward."""

    owner: Owner
    session_id: str | None
    agent_id: str | None
    payload: dict[str, Any]
    query: str
    history: list[tuple[str, str]]
    stream: bool
    key_id: str = ""  # the API key the use is counted against
    occurred_at: datetime | None = None  # when the user said it (None: now)
    speaker: str | None = None  # the user message's ``name`` (who said it)


def inject(messages: list[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """The context as a system message right after the caller's leading system messages."""
    if not block:
        return messages
    i = 0
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        i += 1
    return [*messages[:i], {"role": "system", "content": block}, *messages[i:]]


def _request_id() -> str:
    """The id a client quotes to the operator; the upstream's details are logged under it."""
    return uuid.uuid4().hex[:16]


def _redacted(status: int, request_id: str) -> tuple[int, str, str]:
    """(status, code, message) the client gets for an upstream failure: its HTTP status class
    and the request id, never the upstream's text (it can name the operator's account,
    organisation or key prefix)."""
    what = f"HTTP {status // 100}xx; request id {request_id}"
    if 400 <= status < 500 and status not in (401, 403):
        return status, "upstream_rejected", f"the upstream LLM refused the request ({what})"
    return 502, "upstream_error", f"the upstream LLM failed ({what})"


@dataclass(frozen=True)
class ChatAnswer:
    """What the proxy answers, for the route to send: the upstream's JSON answer
    (``body``) or its event stream relayed (``stream``: SSE bytes), with ``headers``."""

    headers: dict[str, str]
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None


def upstream_error(status: int, body: bytes) -> ApiError:
    """The client's error for an upstream's HTTP ``status``: logged with an id, its text
    never carried (it may quote the prompt or a key)."""
    request_id = _request_id()
    log.warning(
        "upstream LLM answered HTTP %d (request %s): %s",
        status,
        request_id,
        body[:500].decode(errors="replace"),
    )
    code_status, code, message = _redacted(status, request_id)
    return ApiError(code_status, code, message, {"X-Request-Id": request_id})


def _unreachable(exc: Exception) -> ApiError:
    """The upstream could not be asked (or answered nothing usable): logged with an id."""
    request_id = _request_id()
    log.warning("upstream LLM call failed (request %s): %r", request_id, exc)
    headers = {"X-Request-Id": request_id}
    if isinstance(exc, httpx.TimeoutException):
        message = f"the upstream LLM did not answer in time (request id {request_id})"
        return ApiError(504, "upstream_timeout", message, headers)
    message = f"the upstream LLM failed: {type(exc).__name__} (request id {request_id})"
    return ApiError(502, "upstream_error", message, headers)


class ChatService:
    def __init__(
        self,
        llm: LLMSettings,
        limits: LimitSettings,
        context: ContextService,
        sessions: SessionService,
        *,
        caps: ChatSettings | None = None,
        usage: ChatUsageMeter | None = None,
        models_for: Callable[[str], Awaitable[frozenset[str]]] | None = None,
        spend: SpendMeter | None = None,
    ) -> None:
        self.spend = spend or SpendMeter(None, SpendSettings())  # budgets, per-user metering
        self.llm = llm
        self.limits = limits
        self.context = context
        self.sessions = sessions
        self.caps = caps or ChatSettings()
        self.models = allowed_models(self.caps, llm.model)
        self.models_for = models_for  # a tenant's allowed models (its settings), else ^
        self.usage = usage or ChatUsageMeter(None)
        self._http: httpx.AsyncClient | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            timeout = httpx.Timeout(self.llm.chat_timeout_s, connect=5.0)
            self._http = httpx.AsyncClient(timeout=timeout)
        return self._http

    async def aclose(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=5.0)
        await self.usage.aclose()
        await self.spend.aclose()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _context_block(self, call: ChatCall) -> tuple[str, int]:
        if not call.query.strip():
            return "", 0
        limits = self.limits
        try:
            result = await self.context.build(
                call.owner,
                call.query[: limits.content_chars],
                session_id=call.session_id,
                agent_id=call.agent_id,
                history=call.history[-limits.history_items :],
            )
        except ApiError:
            raise
        except Exception:  # memory is an enhancement: answer without it rather than fail
            log.warning("context for the chat proxy failed; answering without it", exc_info=True)
            return "", 0
        return result.context, len(result.memories)

    def _record_later(self, call: ChatCall, answer: str) -> None:
        turn = [("user", call.query), ("assistant", answer)]
        if not all(content.strip() for _, content in turn):
            return
        limit = self.limits.content_chars
        turn = [(role, content[:limit]) for role, content in turn]
        session = call.session_id or DEFAULT_SESSION

        async def run() -> None:
            try:
                await self.sessions.record(
                    call.owner,
                    session,
                    call.agent_id,
                    turn,
                    occurred_at=[call.occurred_at] * 2,
                    speakers=[Speaker(call.speaker), Speaker()],
                )
            except Exception:  # never surfaces in the chat path; the answer is already sent
                log.warning("recording a chat turn failed", exc_info=True)

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def complete(self, call: ChatCall) -> ChatAnswer:
        u = self.llm
        if not u.base_url:
            raise ApiError(
                503, "unavailable", "no upstream LLM is configured (MEMSERVE_LLM_BASE_URL)"
            )
        tenant = call.owner.tenant_id
        models = await self.models_for(tenant) if self.models_for else self.models
        try:
            check_caps(call.payload, self.caps, models)
        except ApiError:
            self.usage.count(call.key_id, tenant, Usage(refused=1))
            raise
        block, n_memories = await self._context_block(call)
        payload = dict(call.payload)
        payload["messages"] = inject(payload["messages"], block)
        if all(payload.get(name) is None for name in TOKEN_FIELDS):
            # Without a limit the upstream would answer up to the model's context:
            # the cap is then the default, so every forwarded call is bounded.
            payload[self.caps.default_tokens_field] = self.caps.max_tokens
        # No model named: the configured one, unless the tenant's list leaves it out.
        payload["model"] = payload.get("model") or (u.model if u.model in models else min(models))
        ticket = await self._admit(call, payload)
        url = u.base_url.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        if u.api_key:
            headers["Authorization"] = f"Bearer {u.api_key}"
        extra = {"X-Memserve-Context-Memories": str(n_memories)}

        def record(answer: str, tokens: Tokens | None, said: str | None = None) -> None:
            """Count the call and keep its turn; ``tokens`` None: the upstream reported
            none (a cut stream, or one that ignored ``include_usage``), so they are
            estimated from every part of the request and of ``answer`` (what it wrote:
            text, tool-call arguments, reasoning). ``said``: the answer's text, the turn."""
            estimated = tokens is None
            if tokens is None:
                tokens = (*estimated_usage(payload, answer), 0)
            self.usage.count(call.key_id, tenant, Usage(1, 0, *tokens[:2]))
            self._spent(ticket, "ok", tokens, estimated)
            self._record_later(call, answer if said is None else said)

        try:
            if not call.stream:
                r = await self.http.post(url, json=payload, headers=headers)
                if r.status_code != 200:
                    self._spent(ticket, f"http_{r.status_code}")
                    raise upstream_error(r.status_code, r.content)
                answer = r.json()
                try:
                    content = answer["choices"][0]["message"].get("content") or ""
                except (KeyError, IndexError, TypeError, AttributeError):
                    log.warning("upstream answer without choices[0].message")
                    content = ""
                record(content, usage_of(answer))
                return ChatAnswer(extra, body=answer)
            # Usage on every stream, so what the upstream bills is what is metered; the
            # client sees the usage chunk only if it asked for it.
            asked = (payload.get("stream_options") or {}).get("include_usage") is True
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }
            request = self.http.build_request("POST", url, json=payload, headers=headers)
            upstream = await self.http.send(request, stream=True)
        except (httpx.HTTPError, ValueError) as exc:
            self._spent(ticket, type(exc).__name__)
            raise _unreachable(exc) from exc
        if upstream.status_code != 200:
            self._spent(ticket, f"http_{upstream.status_code}")
            content = await upstream.aread()
            await upstream.aclose()
            raise upstream_error(upstream.status_code, content)
        if upstream.headers.get("content-type", "").startswith("application/json"):
            # An upstream that ignores `stream`: answer as one SSE chunk so clients still stream.
            try:
                answer = json.loads(await upstream.aread())
            except (httpx.HTTPError, ValueError) as exc:
                self._spent(ticket, type(exc).__name__)
                raise _unreachable(exc) from exc
            finally:
                await upstream.aclose()
            return ChatAnswer(extra, stream=_as_sse(answer, record))
        return ChatAnswer(extra, stream=_relay(upstream, record, keep_usage=asked))

    async def _admit(self, call: ChatCall, payload: dict[str, Any]) -> Ticket | None:
        """The call's metering ticket, or 429 when the tenant's or end user's chat token
        budget is spent (``Retry-After``: when its window rolls over). A database that
        cannot take the intent fails open: the answer matters more than its meter."""
        limit = next((payload[n] for n in TOKEN_FIELDS if payload.get(n) is not None), 0)
        prompt = request_tokens(payload)  # tools, tool calls, images and reasoning too
        tag = CallTag(call.owner.tenant_id, call.owner.user_id, "chat")
        try:
            return await self.spend.begin(tag, str(payload["model"]), prompt, int(limit))
        except OverBudget as exc:
            self.usage.count(call.key_id, call.owner.tenant_id, Usage(refused=1))
            wait = (exc.resumes_at - self.spend.clock()).total_seconds()
            message = (
                f"the chat token budget ({', '.join(exc.scopes)}) is spent until "
                f"{exc.resumes_at.isoformat()}"
            )
            headers = {"Retry-After": str(max(1, math.ceil(wait)))}
            raise ApiError(429, "budget_exceeded", message, headers) from None
        except (psycopg.Error, OSError):
            log.warning("metering a chat call failed; answering unmetered", exc_info=True)
            return None

    def _spent(
        self,
        ticket: Ticket | None,
        outcome: str,
        tokens: Tokens = (0, 0, 0),
        estimated: bool = False,
    ) -> None:
        """Record the call's use after the answer (a background write, never awaited)."""
        if ticket is None:
            return
        ms = (time.perf_counter() - ticket.started) * 1000
        try:
            self.spend.finish_later(ticket, Spent(outcome, *tokens, estimated, ms))
        except RuntimeError:  # no running loop (shutdown): the reconciler counts the intent
            log.warning("chat call %s left to the reconciler", ticket.id)


Tokens = tuple[int, int, int]  # prompt, completion, cached prompt
Record = Callable[..., None]


async def _as_sse(answer: dict[str, Any], record: Record) -> AsyncIterator[bytes]:
    """A complete chat.completion as chat.completion.chunk events."""
    try:
        content = answer["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        content = ""
    base = {k: answer.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    first = {"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": None}
    last = {"index": 0, "delta": {}, "finish_reason": "stop"}
    try:
        for choice in (first, last):
            yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()
        yield b"data: [DONE]\n\n"
    finally:  # the upstream answered (and billed) in full, whether the client stayed or not
        record(content, usage_of(answer))


def _event(line: str) -> Any:
    """The JSON of an SSE ``data:`` line (None for other lines, ``[DONE]`` or bad JSON)."""
    if not line.startswith("data:"):
        return None
    try:
        return json.loads(line[5:].strip())
    except ValueError:
        return None


def _error_event(chunk: dict[str, Any]) -> str:
    """An upstream's in-stream error event, with its text replaced (as ``upstream_error``)."""
    request_id = _request_id()
    log.warning("upstream LLM stream error (request %s): %s", request_id, chunk["error"])
    _, code, message = _redacted(502, request_id)
    return "data: " + json.dumps({"error": {"code": code, "message": message}})


def _written(delta: dict[str, Any]) -> tuple[str, str]:
    """(the text a delta adds to the answer, everything it adds that is billed: tool-call
    names and arguments, reasoning)."""
    text = delta.get("content") if isinstance(delta.get("content"), str) else ""
    billed = [text]
    for key in ("reasoning_content", "reasoning", "refusal"):
        if isinstance(delta.get(key), str):
            billed.append(delta[key])
    calls = delta.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            billed += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return text, "".join(billed)


async def _relay(
    upstream: httpx.Response, record: Record, *, keep_usage: bool = True
) -> AsyncIterator[bytes]:
    """Pass SSE lines through as they arrive, collecting what the answer writes.

    The turn and the use are recorded however the stream ends: at ``[DONE]``, when the
    upstream stops early, or when the client goes away (the generator is then closed
    or cancelled, and only its ``finally`` runs). ``keep_usage`` False: the client did not
    ask for usage (the proxy did): the usage chunk is left out and ``usage`` taken off
    the others, so the client sees the stream it asked for.
    """
    text: list[str] = []
    billed: list[str] = []
    tokens = None  # the final chunk reports usage (stream_options.include_usage)
    try:
        async for line in upstream.aiter_lines():
            chunk = _event(line)
            if isinstance(chunk, dict) and "error" in chunk:
                line = _error_event(chunk)
            elif isinstance(chunk, dict) and "usage" in chunk:
                tokens = usage_of(chunk) or tokens
                if not keep_usage:
                    if not chunk.get("choices"):
                        continue  # the usage chunk: the client did not ask for it
                    line = "data: " + json.dumps({k: v for k, v in chunk.items() if k != "usage"})
            yield (line + "\n").encode()
            if not isinstance(chunk, dict):
                continue
            try:
                delta = chunk["choices"][0].get("delta") or {}
            except (KeyError, IndexError, TypeError, AttributeError):
                continue
            said, wrote = _written(delta) if isinstance(delta, dict) else ("", "")
            text.append(said)
            billed.append(wrote)
    except httpx.HTTPError:
        log.warning("upstream stream broke off", exc_info=True)
    finally:
        # Before any await: in a cancelled task the next await raises again at once.
        record("".join(billed), tokens, "".join(text))
        await upstream.aclose()
