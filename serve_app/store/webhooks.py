"""``webhook_subscriptions`` and ``webhook_deliveries``: what the dispatcher sends where.

A round of the dispatcher (:mod:`serve_app.webhooks.dispatcher`) calls :meth:`fan_out`
per subscription (its feed cursor moves in the transaction that queues the deliveries,
so an event is queued once), then :meth:`claim`: due deliveries, at most one per
(subscription, owner) and only the oldest pending one of each, so an owner's events
arrive in order. A claim is a lease (``next_at`` moves past the send's timeout): a
dispatcher that dies mid-send leaves the delivery to be claimed again, with the same
event id (``webhook-id``), after the lease.

The dispatcher's statements commit asynchronously (``synchronous_commit = off``): a
database crash can lose its last few hundred milliseconds of bookkeeping, and each loss
is one the design already survives (a fan-out and its cursor move vanish together and
are redone, a lost lease is claimed again, a lost delivered mark is a redelivery with
the same ``webhook-id``). What it saves is a WAL flush per statement, which the writes'
own commits otherwise queue behind (bench_events: the flushes, not CPU, were most of
the write path's loss with subscriptions).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import column_list

SUBSCRIPTION_COLUMNS = (
    "id",
    "url",
    "types",
    "include_content",
    "enabled",
    "created_at",
    "updated_at",
)
DELIVERY_COLUMNS = (
    "id",
    "status",
    "attempts",
    "next_at",
    "last_status",
    "last_error",
    "created_at",
    "delivered_at",
    "owner",
)

_FAN_OUT = """
WITH sub AS (SELECT * FROM webhook_subscriptions WHERE id = %(id)s FOR UPDATE SKIP LOCKED),
ev AS (SELECT e.id, e.txid, e.type, concat_ws('/', e.user_id, e.agent_id) AS owner
       FROM memory_events e, sub
       WHERE e.tenant_id = sub.tenant_id AND (e.txid, e.id) > (sub.cursor_txid, sub.cursor_id)
         AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
       ORDER BY e.txid, e.id LIMIT %(batch)s),
ins AS (INSERT INTO webhook_deliveries (subscription_id, event_row, owner)
        SELECT sub.id, ev.id, ev.owner FROM ev, sub
        WHERE cardinality(sub.types) = 0 OR ev.type = ANY(sub.types)
        ORDER BY ev.txid, ev.id RETURNING 1),
moved AS (UPDATE webhook_subscriptions s SET cursor_txid = last.txid, cursor_id = last.id
          FROM (SELECT txid, id FROM ev ORDER BY txid DESC, id DESC LIMIT 1) last
          WHERE s.id = %(id)s RETURNING 1)
SELECT (SELECT count(*) FROM ev) AS scanned, (SELECT count(*) FROM ins) AS queued,
       (SELECT count(*) FROM moved) AS moved
"""

# Due deliveries, each the oldest pending one of its owner; or (``owner`` given: the
# caller holds that owner's chain, its earlier ones delivered) the owner's next ``n``.
_CLAIM = """
WITH due AS (
    SELECT d.id FROM webhook_deliveries d
    WHERE d.subscription_id = %(sub)s AND d.status = 'pending' AND d.next_at <= now()
      AND (%(owner)s::text IS NULL OR d.owner = %(owner)s)
      AND (%(owner)s::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM webhook_deliveries p
           WHERE p.subscription_id = d.subscription_id AND p.owner = d.owner
           AND p.status = 'pending' AND p.id < d.id))
    ORDER BY d.id LIMIT %(n)s FOR UPDATE OF d SKIP LOCKED)
UPDATE webhook_deliveries d SET next_at = now() + make_interval(secs => %(lease)s)
FROM due, memory_events e, webhook_subscriptions s
WHERE d.id = due.id AND e.id = d.event_row AND s.id = d.subscription_id
  AND (%(owner)s::text IS NULL OR (SELECT min(id) FROM due) = (SELECT min(p.id)
       FROM webhook_deliveries p WHERE p.subscription_id = %(sub)s AND p.owner = %(owner)s
       AND p.status = 'pending'))  -- a chain starts at the owner's oldest pending, or not
RETURNING d.id AS delivery_id, d.attempts, d.subscription_id, d.owner, s.url, s.secret,
          s.include_content, e.event_id, e.type, e.user_id, e.agent_id, e.session_id, e.scope,
          e.memory_id, e.version, e.decision, e.reason, e.actor, e.data, e.occurred_at,
          CASE WHEN s.include_content THEN e.content END AS content
"""


_WORK = """
SELECT s.id,
       EXISTS (SELECT 1 FROM memory_events e
               WHERE e.tenant_id = s.tenant_id AND (e.txid, e.id) > (s.cursor_txid, s.cursor_id)
                 AND e.txid < pg_snapshot_xmin(pg_current_snapshot())) AS new,
       EXISTS (SELECT 1 FROM webhook_deliveries d
               WHERE d.subscription_id = s.id AND d.status = 'pending'
                 AND d.next_at <= now()) AS due
FROM (SELECT id, tenant_id, cursor_txid, cursor_id FROM webhook_subscriptions WHERE enabled
      ORDER BY random() LIMIT %(n)s) s
ORDER BY s.id
"""

_DELIVERED = """
UPDATE webhook_deliveries d SET status = 'delivered', attempts = d.attempts + 1,
       delivered_at = now(), last_status = x.status, last_error = NULL
FROM unnest(%(ids)s::bigint[], %(statuses)s::int[]) AS x(id, status)
WHERE d.id = x.id AND d.status = 'pending'
"""


class WebhookStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def _async_commit(self) -> AsyncIterator[AsyncConnection]:
        """A transaction whose commit does not wait for its WAL flush (module doc)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            yield conn

    # ---------- subscriptions (admin) ----------

    async def create(
        self,
        tenant_id: str,
        url: str,
        types: Sequence[str],
        include_content: bool,
        enabled: bool,
        secret: str,
        *,
        limit: int,
    ) -> dict[str, Any] | None:
        """A new subscription (it receives events from now on); None: the tenant has
        ``limit`` already."""
        query = sql.SQL(
            "INSERT INTO webhook_subscriptions (tenant_id, url, types, include_content, enabled,"
            " secret) SELECT %(t)s, %(url)s, %(types)s, %(content)s, %(enabled)s, %(secret)s"
            " WHERE (SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = %(t)s)"
            " < %(limit)s RETURNING {}"
        ).format(column_list(SUBSCRIPTION_COLUMNS))
        params = {
            "t": tenant_id,
            "url": url,
            "types": list(types),
            "content": include_content,
            "enabled": enabled,
            "secret": secret,
            "limit": limit,
        }
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"wh:{tenant_id}"])
            return await (await conn.execute(query, params)).fetchone()

    async def list(self, tenant_id: str) -> list[dict[str, Any]]:
        query = sql.SQL(
            "SELECT {} FROM webhook_subscriptions WHERE tenant_id = %(t)s ORDER BY created_at, id"
        ).format(column_list(SUBSCRIPTION_COLUMNS))
        async with self.pool.connection() as conn:
            return await (await conn.execute(query, {"t": tenant_id})).fetchall()

    async def states(self, tenant_id: str) -> dict[uuid.UUID, dict[str, Any]]:
        """Per subscription of the tenant: pending and dead deliveries, the age (s) of
        the oldest pending one's event (its lag) and the last delivery's time."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT s.id, (SELECT count(*) FROM webhook_deliveries d"
                "  WHERE d.subscription_id = s.id AND d.status = 'pending') AS pending,"
                " (SELECT count(*) FROM webhook_deliveries d"
                "  WHERE d.subscription_id = s.id AND d.status = 'dead') AS dead,"
                " (SELECT extract(epoch FROM now() - min(e.occurred_at))::float8"
                "  FROM webhook_deliveries d JOIN memory_events e ON e.id = d.event_row"
                "  WHERE d.subscription_id = s.id AND d.status = 'pending') AS lag_s,"
                " (SELECT max(d.delivered_at) FROM webhook_deliveries d"
                "  WHERE d.subscription_id = s.id AND d.status = 'delivered') AS last_delivered_at"
                " FROM webhook_subscriptions s WHERE s.tenant_id = %(t)s",
                {"t": tenant_id},
            )
            return {r.pop("id"): r for r in await cur.fetchall()}

    async def get(self, tenant_id: str, sub_id: uuid.UUID) -> dict[str, Any] | None:
        query = sql.SQL(
            "SELECT {} FROM webhook_subscriptions WHERE tenant_id = %(t)s AND id = %(id)s"
        ).format(column_list(SUBSCRIPTION_COLUMNS))
        async with self.pool.connection() as conn:
            return await (await conn.execute(query, {"t": tenant_id, "id": sub_id})).fetchone()

    async def update(
        self, tenant_id: str, sub_id: uuid.UUID, changes: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Change url, types, include_content or enabled (the keys of ``changes``)."""
        sets = [sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in changes]
        sets.append(sql.SQL("updated_at = now()"))
        query = sql.SQL(
            "UPDATE webhook_subscriptions SET {} WHERE tenant_id = %(t)s AND id = %(id)s"
            " RETURNING {}"
        ).format(sql.SQL(", ").join(sets), column_list(SUBSCRIPTION_COLUMNS))
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, {**changes, "t": tenant_id, "id": sub_id})
            return await cur.fetchone()

    async def delete(self, tenant_id: str, sub_id: uuid.UUID) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM webhook_subscriptions WHERE tenant_id = %(t)s AND id = %(id)s",
                {"t": tenant_id, "id": sub_id},
            )
            return cur.rowcount > 0

    async def deliveries(
        self, tenant_id: str, sub_id: uuid.UUID, *, status: str | None, limit: int
    ) -> list[dict[str, Any]]:
        """The subscription's delivery log, newest first, with each event's id and type."""
        query = sql.SQL(
            "SELECT {cols}, e.event_id, e.type FROM webhook_deliveries d"
            " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
            " JOIN memory_events e ON e.id = d.event_row"
            " WHERE s.tenant_id = %(t)s AND s.id = %(id)s"
            " AND (%(status)s::text IS NULL OR d.status = %(status)s)"
            " ORDER BY d.id DESC LIMIT %(limit)s"
        ).format(cols=sql.SQL(", ").join(sql.Identifier("d", c) for c in DELIVERY_COLUMNS))
        params = {"t": tenant_id, "id": sub_id, "status": status, "limit": limit}
        async with self.pool.connection() as conn:
            return await (await conn.execute(query, params)).fetchall()

    async def replay(self, tenant_id: str, sub_id: uuid.UUID, *, limit: int) -> int:
        """Dead deliveries (oldest ``limit``) back to pending, attempts reset."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_at = now(),"
                " last_error = NULL WHERE id IN (SELECT d.id FROM webhook_deliveries d"
                " JOIN webhook_subscriptions s ON s.id = d.subscription_id"
                " WHERE s.tenant_id = %(t)s AND s.id = %(id)s AND d.status = 'dead'"
                " ORDER BY d.id LIMIT %(limit)s)",
                {"t": tenant_id, "id": sub_id, "limit": limit},
            )
            return cur.rowcount

    # ---------- the dispatcher ----------

    async def work(self, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` enabled subscriptions (a random pick when there are more, so
        none starves behind the first ``limit``) in id order, each with whether it has
        feed events to fan out (``new``) and deliveries due (``due``): one statement a
        round, so an idle round costs one round trip, not a fan-out and a claim
        transaction per subscription."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(_WORK, {"n": limit})
            return await cur.fetchall()

    async def fan_out(self, sub_id: uuid.UUID, batch: int) -> int:
        """Queue the subscription's next feed events (at most ``batch``); how many."""
        async with self._async_commit() as conn:
            row = await (await conn.execute(_FAN_OUT, {"id": sub_id, "batch": batch})).fetchone()
            return int(row["queued"])

    async def claim(
        self, sub_id: uuid.UUID, n: int, lease_s: float, owner: str | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``n`` due deliveries of the subscription, each the oldest pending one of
        its owner; with ``owner`` (whose earlier deliveries the caller has sent), that
        owner's next ``n`` in order. Leased for ``lease_s``, with what sending needs."""
        return await self.settle_and_claim([], [], sub_id, n, lease_s, owner)

    async def settle_and_claim(
        self,
        sent: list[int],
        statuses: list[int],
        sub_id: uuid.UUID,
        n: int,
        lease_s: float,
        owner: str | None = None,
    ) -> list[dict[str, Any]]:
        """Mark ``sent`` delivered (with the receivers' ``statuses``), then claim as
        :meth:`claim` does, in one transaction: a chain's run costs one commit, not one
        per delivery. A dispatcher that dies before it commits sends those again (at
        least once; the same ``webhook-id``)."""
        params = {"sub": sub_id, "n": n, "lease": lease_s, "owner": owner}
        async with self._async_commit() as conn:
            if sent:
                await conn.execute(_DELIVERED, {"ids": sent, "statuses": statuses})
            rows = await (await conn.execute(_CLAIM, params)).fetchall() if n > 0 else []
        return sorted(rows, key=lambda r: r["delivery_id"])  # UPDATE ... RETURNING: any order

    async def release(self, delivery_ids: list[int]) -> None:
        """Claimed but not sent (a chain stopped): due again now, in their order."""
        if delivery_ids:
            async with self._async_commit() as conn:
                await conn.execute(
                    "UPDATE webhook_deliveries SET next_at = now()"
                    " WHERE id = ANY(%(ids)s) AND status = 'pending'",
                    {"ids": delivery_ids},
                )

    async def delivered(self, delivery_ids: list[int], statuses: list[int]) -> None:
        """Mark sent deliveries delivered, with the receivers' HTTP statuses."""
        if delivery_ids:
            async with self._async_commit() as conn:
                await conn.execute(_DELIVERED, {"ids": delivery_ids, "statuses": statuses})

    async def failed(
        self, delivery_id: int, status: int | None, error: str, *, retry_in_s: float | None
    ) -> None:
        """A failed attempt: retried after ``retry_in_s``, or dead when None."""
        async with self._async_commit() as conn:
            await conn.execute(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = %(s)s,"
                " last_error = left(%(e)s, 500),"
                " status = CASE WHEN %(retry)s::float8 IS NULL THEN 'dead' ELSE status END,"
                " next_at = now() + make_interval(secs => coalesce(%(retry)s::float8, 0))"
                " WHERE id = %(id)s",
                {"id": delivery_id, "s": status, "e": error, "retry": retry_in_s},
            )

    async def backlog(self) -> dict[str, float]:
        """Pending deliveries and the age (s) of the oldest one's event: queue and lag."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS pending, coalesce(extract(epoch FROM now()"
                " - min(e.occurred_at)), 0)::float8 AS lag_s FROM webhook_deliveries d"
                " JOIN memory_events e ON e.id = d.event_row WHERE d.status = 'pending'"
            )
            row = await cur.fetchone()
            return {"pending": float(row["pending"]), "lag_s": float(row["lag_s"])}
