"""Meters every LLM call and enforces the token budgets.

Each call goes :meth:`SpendMeter.begin` (budget check + an intent row reserving
the estimated prompt plus ``max_tokens``), the call, then :meth:`finish` (the
response's ``usage``, or an estimate marked so) or :meth:`cancel` (nothing was sent).
The extractor's calls finish inline (they are background work already); the chat
proxy finishes in a background task after the answer, off the caller's path. An
intent a dead replica left open is closed by :meth:`maintain` (any extractor
replica, every ``spend.reconcile_interval_s``), which also prunes old rows. The
at-least-once argument is in serve_app/store/llm_spend.py and docs/operations.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import psycopg

from serve_app.metrics import Flusher, SpendMetrics
from serve_app.settings import SpendSettings
from serve_app.spend.estimate import usage_of
from serve_app.store.llm_spend import (
    SCOPES,
    CallTag,
    Limits,
    OverBudget,
    SpendStore,
    Spent,
    Used,
    window_end,
)
from serve_app.text import count_tokens

log = logging.getLogger(__name__)
Budgets = Callable[[str], Awaitable[Mapping[str, Limits]]]
MAX_ALERTS_SEEN = 10_000


@dataclass(frozen=True)
class Ticket:
    """A call admitted: its intent row (None: not stored) and what it reserved."""

    id: int | None
    tag: CallTag
    model: str
    est_prompt: int
    started: float


def spent_from(outcome: str, ticket: Ticket, answer: Any, text: str) -> Spent:
    """What a completed call used: its ``usage``, else the estimate (marked estimated)."""
    ms = (time.perf_counter() - ticket.started) * 1000
    reported = usage_of(answer)
    if reported is None:
        return Spent(outcome, ticket.est_prompt, count_tokens(text), 0, True, ms)
    return Spent(outcome, *reported, False, ms)


class SpendMeter:
    def __init__(
        self,
        store: SpendStore | None,
        settings: SpendSettings,
        budgets: Budgets | None = None,
        metrics: SpendMetrics | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.budgets = budgets
        self.metrics = metrics or SpendMetrics(settings.metric_tenants)
        self.flusher = Flusher([self.metrics])  # started by the first call on a loop
        self.clock = clock or (lambda: datetime.now(UTC))
        self._alerted: set[tuple[str, str, str, date]] = set()
        self._background: set[asyncio.Task[None]] = set()

    def today(self) -> date:
        return self.clock().astimezone(UTC).date()

    async def limits(self, tag: CallTag) -> Limits:
        if self.budgets is None:
            return Limits()
        return (await self.budgets(tag.tenant_id)).get(tag.group) or Limits()

    async def begin(self, tag: CallTag, model: str, est: int, max_tokens: int) -> Ticket:
        """Admit a call (raises :class:`OverBudget` before anything is sent) and write
        its intent. ``est``: the prompt's estimated tokens
        (:func:`serve_app.spend.estimate.request_tokens`)."""
        started = time.perf_counter()
        self.flusher.start()
        if self.store is None:
            return Ticket(None, tag, model, est, started)
        limits, day = await self.limits(tag), self.today()
        try:
            call_id, used = await self.store.begin(tag, model, day, est, est + max_tokens, limits)
        except OverBudget:
            self.metrics.budget_event(tag.tenant_id, tag.group, "over")
            raise
        if used is not None:
            await self._soft(tag, limits, used, est + max_tokens, day)
        return Ticket(call_id, tag, model, est, started)

    async def _soft(self, tag: CallTag, limits: Limits, used: Used, add: int, day: date) -> None:
        """The soft threshold: a metric and a log line once per window (across replicas:
        the first to record the window's alert row logs it)."""
        for scope in SCOPES:
            cap = getattr(limits, scope)
            if not cap or getattr(used, scope) + add < self.settings.soft_threshold * cap:
                continue
            win = day.replace(day=1) if scope == "tenant_monthly" else day
            name = f"user_daily:{tag.user_id or ''}" if scope == "user_daily" else scope
            seen = (tag.tenant_id, tag.group, name, win)
            if seen in self._alerted:
                continue
            if len(self._alerted) >= MAX_ALERTS_SEEN:
                self._alerted.clear()
            self._alerted.add(seen)
            assert self.store is not None
            if await self.store.first_alert(tag, name, win):
                self.metrics.budget_event(tag.tenant_id, tag.group, "soft")
                log.warning(
                    "tenant %s: %s LLM budget %s at %d of %d tokens (%.0f%% threshold; window"
                    " ends %s)",
                    tag.tenant_id,
                    tag.group,
                    name,
                    getattr(used, scope) + add,
                    cap,
                    self.settings.soft_threshold * 100,
                    window_end(scope, day).isoformat(),
                )

    async def finish(self, ticket: Ticket, spent: Spent) -> None:
        """Record what the call used; never raises (an unwritten intent is closed as lost
        by the reconciler, so the call is still counted)."""
        tokens = {
            "prompt": spent.prompt_tokens,
            "completion": spent.completion_tokens,
            "cached": spent.cached_tokens,
            "estimated": spent.total if spent.estimated else 0,
        }
        self.metrics.call(ticket.tag.tenant_id, ticket.tag.purpose, spent.outcome, tokens)
        if self.store is None or ticket.id is None:
            return
        try:
            await self.store.finish(ticket.id, spent)
        except (psycopg.Error, OSError):
            log.warning(
                "recording LLM call %s failed; the reconciler counts it", ticket.id, exc_info=True
            )

    def finish_later(self, ticket: Ticket, spent: Spent) -> None:
        """:meth:`finish` in a background task (the chat path: the answer is not held)."""
        task = asyncio.get_running_loop().create_task(self.finish(ticket, spent))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def cancel(self, ticket: Ticket) -> None:
        """The call was never sent (breaker open): drop its intent."""
        if self.store is None or ticket.id is None:
            return
        try:
            async with self.store.pool.connection() as conn:
                await conn.execute(
                    "DELETE FROM llm_calls WHERE id = %s AND finished_at IS NULL", (ticket.id,)
                )
        except (psycopg.Error, OSError):
            log.warning("dropping an unsent LLM call's intent failed", exc_info=True)

    async def deferred(self, tenant_id: str, user_id: str | None) -> OverBudget | None:
        """Why background work of this end user waits now (None: it may run). No row is
        written: the pipeline asks before claiming turns, session status to show it."""
        tag = CallTag(tenant_id, user_id, "extract")
        limits = await self.limits(tag)
        if self.store is None or not limits.any:
            return None
        day = self.today()
        used = await self.store.used(tag, day)
        scopes = [s for s in SCOPES if (c := getattr(limits, s)) and getattr(used, s) >= c]
        return OverBudget(tag, scopes, day) if scopes else None

    async def maintain(self) -> int:
        """Close stale intents (their replica died) and prune old rows; closed count."""
        if self.store is None:
            return 0
        s = self.settings
        closed = await self.store.reconcile(s.intent_stale_s)
        if closed:
            log.warning(
                "%d LLM calls were never finished (a replica died); counted as lost"
                " at their reservation",
                closed,
            )
        await self.store.prune(s.raw_retention_days, s.daily_retention_days)
        return closed

    async def aclose(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=5.0)
        await self.flusher.stop()
