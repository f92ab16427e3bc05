"""Async client for any OpenAI-compatible chat-completions endpoint.

Asks for JSON output: a strict ``json_schema`` response format when the caller gives
the answer's schema (serve_app/llm/answer_schema.py) and the settings allow it,
else ``json_object``. An endpoint that refuses the strict format (HTTP 400/422) is asked
once more in ``json_object`` and remembered, per endpoint and model, as one that
refuses it. Every call is bounded by
a timeout, retries transient failures (connection errors, timeouts, 429/5xx)
with exponential backoff, and goes through a circuit breaker so an outage costs
one fast refusal per call instead of a pile of hanging requests.

With a :class:`SpendMeter`, a call tagged with its tenant, end user and purpose is
metered (serve_app/spend/meter.py): admitted against the budgets before anything is
sent (:class:`OverBudget` propagates: the caller defers its work), its ``usage`` (or
an estimate) recorded after; each retry attempt is metered as a call of its own.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, ClassVar

import httpx

from serve_app.llm.answer_schema import ResponseSchema
from serve_app.llm.breaker import CircuitBreaker, CircuitOpen
from serve_app.settings import LLMSettings
from serve_app.spend.estimate import request_tokens
from serve_app.spend.meter import SpendMeter, Ticket, spent_from
from serve_app.store.llm_spend import CallTag, Spent

log = logging.getLogger(__name__)


class LLMUnavailable(RuntimeError):
    """Transient: the endpoint is down, slow, overloaded or the breaker is open.

    The turns stay queued and are retried later.
    """

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # timeout | connect | http_5xx | http_429 | circuit_open | http_4xx
        self.status = status  # the HTTP status, when the endpoint answered


JSON_OBJECT: dict[str, Any] = {"type": "json_object"}
# What a server that does not know ``json_schema`` answers (OpenAI-compatible servers say
# 400; FastAPI-based ones 422); other 4xx (auth, not found) are not about the format.
_FORMAT_REFUSED = {400, 422}


def _cut(answer: dict) -> bool:
    """Whether the answer stopped at max_tokens (OpenAI's ``finish_reason: length``)."""
    try:
        return answer["choices"][0].get("finish_reason") == "length"
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class LLMClient:
    # Endpoints (base URL and model) seen refusing, or accepting, the strict format. Shared
    # by every client of the process: the extraction, summary and consolidation clients
    # of one endpoint learn it once, not once each.
    _refuses_strict: ClassVar[set[tuple[str, str]]] = set()
    _accepts_strict: ClassVar[set[tuple[str, str]]] = set()

    def __init__(
        self,
        config: LLMSettings,
        transport: httpx.AsyncBaseTransport | None = None,
        meter: SpendMeter | None = None,
    ):
        self.meter = meter
        if not config.base_url:
            raise ValueError("LLMClient needs llm.base_url (MEMSERVE_LLM_BASE_URL)")
        self.config = config
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._http = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=min(5.0, config.timeout_s)),
            transport=transport,
        )
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_reset_s)
        self._endpoint = (config.base_url.rstrip("/"), config.model)

    def answer_format(self, schema: ResponseSchema | None) -> str:
        """The response format a call with ``schema`` is sent with now (a metrics label)."""
        return self._response_format(schema)["type"]

    def _response_format(self, schema: ResponseSchema | None) -> dict[str, Any]:
        if (
            schema is None
            or self.config.response_format != "json_schema"
            or self._endpoint in self._refuses_strict
        ):
            return JSON_OBJECT
        return schema.response_format()

    async def close(self) -> None:
        await self._http.aclose()

    async def complete_json(
        self,
        system: str,
        user: str,
        *,
        tag: CallTag | None = None,
        max_tokens: int | None = None,
        schema: ResponseSchema | None = None,
    ) -> str:
        """The assistant message content of one JSON-mode completion.

        Raises :class:`LLMUnavailable` for anything transient (after retries), and
        ``OverBudget`` (before any request) when ``tag``'s budget is spent.
        ``max_tokens``: the answer's cap (default: the configured one). ``schema``: the
        answer's strict schema (None: ``json_object``).
        """
        max_tokens = max_tokens or self.config.max_tokens
        ticket = None
        if self.meter is not None and tag is not None:
            est = request_tokens(
                self._body(system, user, max_tokens, self._response_format(schema))
            )
            ticket = await self.meter.begin(tag, self.config.model, est, max_tokens)
        try:
            self.breaker.before_call()
        except CircuitOpen as exc:
            if ticket is not None:
                await self.meter.cancel(ticket)  # type: ignore[union-attr]
            raise LLMUnavailable("circuit_open", str(exc)) from None
        answer, content = await self._formatted(system, user, max_tokens, ticket, schema)
        if max_tokens < self.config.max_tokens and _cut(answer):
            # sized too small for this answer: ask once more with the full cap
            log.info(
                "LLM answer cut at max_tokens=%d; asking again at %d",
                max_tokens,
                self.config.max_tokens,
            )
            return await self.complete_json(system, user, tag=tag, schema=schema)
        return content

    async def _formatted(
        self,
        system: str,
        user: str,
        max_tokens: int,
        ticket: Ticket | None,
        schema: ResponseSchema | None,
    ) -> tuple[dict, str]:
        """:meth:`_attempts` in the strict format where the endpoint takes it; a refusal
        of the format itself is asked once more in ``json_object`` and remembered."""
        response_format = self._response_format(schema)
        strict = response_format is not JSON_OBJECT
        try:
            out = await self._attempts(system, user, max_tokens, ticket, response_format)
        except LLMUnavailable as exc:
            if not strict or exc.status not in _FORMAT_REFUSED:
                raise
            if self._endpoint in self._accepts_strict:
                raise  # it took the format before: this refusal is about something else
            ticket = await self._again(ticket, max_tokens)
            out = await self._attempts(system, user, max_tokens, ticket, JSON_OBJECT)
            self._refuses_strict.add(self._endpoint)
            log.warning(
                "LLM endpoint %s (model %s) refused the json_schema response format; "
                "using json_object from now on",
                *self._endpoint,
            )
            return out
        if strict:
            self._accepts_strict.add(self._endpoint)
        return out

    @staticmethod
    def _failed(ticket: Ticket | None, kind: str, max_tokens: int) -> Spent:
        """A failed call's use: an error answer is not billed; a timed-out request may
        have been (the provider went on), so it counts at its reservation, estimated."""
        if kind != "timeout" or ticket is None:
            return Spent(kind)
        return Spent(kind, ticket.est_prompt, max_tokens, 0, True)

    async def _again(self, ticket: Ticket | None, max_tokens: int) -> Ticket | None:
        """The intent of a retry of ``ticket``'s call (None: not metered)."""
        if ticket is None or self.meter is None:
            return None
        try:
            return await self.meter.begin(ticket.tag, ticket.model, ticket.est_prompt, max_tokens)
        except Exception:  # over budget, or the intent could not be written: not sent
            self.breaker.failure()  # the verdict of the attempts so far (a trial slot freed)
            raise

    async def _finish(self, ticket: Ticket | None, spent: Spent) -> None:
        if ticket is not None and self.meter is not None:
            await self.meter.finish(ticket, spent)

    def _body(
        self, system: str, user: str, max_tokens: int, response_format: dict[str, Any]
    ) -> dict[str, Any]:
        """The request: what is sent, and what its estimate counts (the schema too)."""
        return {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
            "max_tokens": max_tokens,
            "response_format": response_format,
        }

    async def _attempts(
        self,
        system: str,
        user: str,
        max_tokens: int,
        ticket: Ticket | None,
        response_format: dict[str, Any],
    ) -> tuple[dict, str]:
        """(the answer, its content), with retries and the breaker's bookkeeping.

        Each attempt is metered on its own intent (``ticket`` is the first's): a request
        that timed out may still have been answered and billed, and its retry is billed
        again, so one intent for both would count what the provider served once.
        A retry is admitted against the budgets like any call (:class:`OverBudget`
        propagates; the failed attempts before it count as the breaker's failure).
        """
        body = self._body(system, user, max_tokens, response_format)
        last: LLMUnavailable | None = None
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                delay = self.config.backoff_s * (2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random()))
                ticket = await self._again(ticket, max_tokens)
            try:
                answer, content = await self._post(body)
            except LLMUnavailable as exc:
                last = exc
                await self._finish(ticket, self._failed(ticket, exc.kind, max_tokens))
                if exc.kind == "http_4xx":
                    break  # our request is wrong; retrying will not help
                log.warning("LLM call failed (%s), attempt %d", exc, attempt + 1)
                continue
            self.breaker.success()
            if ticket is not None:
                await self._finish(ticket, spent_from("ok", ticket, answer, content))
            return answer, content
        assert last is not None
        if last.kind == "http_4xx":
            self.breaker.neutral()  # our request was refused: the LLM itself is fine
        else:
            self.breaker.failure()
        raise last

    async def _post(self, body: dict) -> tuple[dict, str]:
        try:
            resp = await self._http.post("/chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise LLMUnavailable("timeout", f"LLM timed out: {type(exc).__name__}") from None
        except httpx.HTTPError as exc:
            raise LLMUnavailable("connect", f"LLM unreachable: {type(exc).__name__}") from None
        if resp.status_code >= 400:
            kind = (
                "http_429"
                if resp.status_code == 429
                else "http_5xx"
                if resp.status_code in _RETRYABLE_STATUS
                else "http_4xx"
            )
            # The upstream's text stays in this log: it can name the operator's account, org
            # or key, and the error itself reaches API callers (dead letters, job status).
            log.warning(
                "LLM answered HTTP %d: %s", resp.status_code, resp.text[:500].replace("\n", " ")
            )
            raise LLMUnavailable(kind, f"LLM answered HTTP {resp.status_code}", resp.status_code)
        try:
            answer = resp.json()
            return answer, answer["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            # Not an OpenAI-shaped body: a broken proxy, treat as transient.
            raise LLMUnavailable("http_5xx", "LLM answer is not a chat completion") from None
