"""The webhook dispatcher: fans the event feed out to subscriptions and sends them.

It runs beside the writes, never in them: a write only commits its event row
(:mod:`serve_app.store.events`); this loop, in the Extractor tier (on a thread of its
own at a lower priority: :mod:`serve_app.webhooks.worker`), reads settled events
afterwards. Each send is its own task, at most ``in_flight_per_subscription`` per
subscription, so a receiver that hangs holds its own slots until the timeout and no
other subscription's. A dispatcher that dies mid-send loses nothing: the claim is a
lease, and the delivery is sent again (same ``webhook-id``) once it runs out.
Failures retry with exponential backoff and jitter, then go dead (replay: admin API).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.metrics import WebhookMetrics
from serve_app.periodic import Periodic
from serve_app.settings import WebhookSettings
from serve_app.store.webhooks import WebhookStore
from serve_app.webhooks.sender import Answer, Sender
from serve_app.webhooks.ssrf import TargetGuard

log = logging.getLogger(__name__)
CHAIN = 20  # deliveries of one owner claimed at a time by a running chain
BACKLOG_EVERY_S = 5.0  # how often a round measures pending deliveries and lag
# After a claim came back short (every claimable owner's oldest delivery is in flight or
# backing off), a subscription is claimed for again only when this round queued new
# deliveries, a chain of it ended, or this long has passed (a backoff, a replay, a lease
# another replica let run out): a short claim scans every pending delivery (3.3 ms for
# 800 behind 4 chains), which 2 subscriptions' rounds every 50 ms made ~13% of a core.
RECLAIM_S = 1.0


class Dispatcher:
    def __init__(
        self,
        store: WebhookStore,
        sender: Sender,
        s: WebhookSettings,
        *,
        metrics: WebhookMetrics | None = None,
        jitter: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.sender, self.s = store, sender, s
        self.metrics = metrics or WebhookMetrics()
        self.jitter = jitter  # 0..1, injected so tests can pin the backoff
        self.clock = clock
        self._measured = float("-inf")
        self.lease_s = 2 * s.timeout_s + 5  # a claim outlives any send it covers
        self._tasks: dict[uuid.UUID, set[asyncio.Task[None]]] = {}
        self._short: dict[uuid.UUID, float] = {}  # subscription -> when a claim came back short
        self._periodic = Periodic(
            self.run_once, s.interval_s, log=log, failed="a webhook dispatch round failed"
        )

    @classmethod
    def from_settings(
        cls, pool: AsyncConnectionPool, s: WebhookSettings, metrics: WebhookMetrics | None = None
    ) -> Dispatcher:
        """The dispatcher an Extractor replica runs (``interval_s`` 0: never started)."""
        sender = Sender(
            TargetGuard(s.allowed_networks),
            timeout_s=s.timeout_s,
            max_response_bytes=s.max_response_bytes,
        )
        return cls(WebhookStore(pool), sender, s, metrics=metrics)

    def backoff(self, attempts: int) -> float:
        """Seconds before attempt ``attempts + 1``: doubling, capped, half of it jittered."""
        base = min(self.s.max_backoff_s, self.s.backoff_s * 2 ** max(attempts - 1, 0))
        return base * (0.5 + 0.5 * self.jitter())

    def in_flight(self, sub_id: uuid.UUID | None = None) -> int:
        if sub_id is not None:
            return len(self._tasks.get(sub_id, ()))
        return sum(len(t) for t in self._tasks.values())

    async def run_once(self) -> int:
        """One round: queue new events, start sends where slots are free; sends started."""
        started = 0
        for sub in await self.store.work(self.s.subscriptions_per_round):
            sub_id, queued = sub["id"], 0
            if sub["new"]:
                queued = await self.store.fan_out(sub_id, self.s.fanout_batch)
                self.metrics.queue(queued)
            free = self.s.in_flight_per_subscription - self.in_flight(sub_id)
            short = self._short.get(sub_id)
            if free <= 0 or not (sub["due"] or queued):
                continue
            if not queued and short is not None and self.clock() - short < RECLAIM_S:
                continue
            rows = await self.store.claim(sub_id, free, self.lease_s)
            if len(rows) < free:
                self._short[sub_id] = self.clock()
            else:
                self._short.pop(sub_id, None)
            for row in rows:
                task = asyncio.get_running_loop().create_task(self._deliver(row))
                tasks = self._tasks.setdefault(sub_id, set())
                tasks.add(task)
                task.add_done_callback(lambda t, s=sub_id: self._done(s, t))
                started += 1
        if self.clock() - self._measured >= BACKLOG_EVERY_S:
            self._measured = self.clock()
            self.metrics.state.update(await self.store.backlog())
        return started

    def _done(self, sub_id: uuid.UUID, task: asyncio.Task[None]) -> None:
        self._short.pop(sub_id, None)  # its owner's next delivery may be claimable now
        tasks = self._tasks.get(sub_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._tasks[sub_id]

    async def _deliver(self, row: dict[str, Any]) -> None:
        """Send ``row``; on success go on with the same owner's next due deliveries
        (``CHAIN`` claimed at a time, at most ``fanout_batch`` in all), so an owner's
        backlog drains without a round per event. A run's successes are marked in the
        transaction that claims the next run (one commit per run, not per delivery); a
        failure stops the chain there and releases the rest of the claimed run, which
        follows it in order after its backoff."""
        sub, owner = row["subscription_id"], row["owner"]
        run, sent = [row], 0
        try:
            while run:
                done: list[int] = []
                statuses: list[int] = []
                for i, r in enumerate(run):
                    answer = await self.sender.send(r)
                    if not answer.ok:
                        await self.store.delivered(done, statuses)
                        await self._failed(r, answer)
                        await self.store.release([x["delivery_id"] for x in run[i + 1 :]])
                        return
                    done.append(r["delivery_id"])
                    statuses.append(answer.status or 0)
                    self.metrics.outcome("delivered")
                sent += len(run)
                more = min(CHAIN, self.s.fanout_batch - sent)
                run = await self.store.settle_and_claim(
                    done, statuses, sub, more, self.lease_s, owner
                )
        except Exception:  # the leases run out and the unrecorded ones are sent again
            log.warning("recording webhook deliveries failed", exc_info=True)

    async def _failed(self, row: dict[str, Any], answer: Answer) -> None:
        attempts = row["attempts"] + 1
        retry = None if attempts >= self.s.max_attempts else self.backoff(attempts)
        await self.store.failed(
            row["delivery_id"], answer.status, answer.error or "", retry_in_s=retry
        )
        self.metrics.outcome("dead" if retry is None else "failed")

    async def drain(self) -> None:
        """Wait for every send in flight (tests; a stop)."""
        while self._tasks:
            await asyncio.gather(
                *[t for ts in self._tasks.values() for t in ts], return_exceptions=True
            )

    def start(self) -> Dispatcher:
        self._periodic.start()
        return self

    async def stop(self) -> None:
        """Stop the loop, cancel sends in flight (their leases bring them back), close."""
        await self._periodic.stop()
        tasks = [t for ts in self._tasks.values() for t in ts]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        await self.sender.aclose()
