"""What every LLM call spent, per tenant, end user, purpose, model and UTC day.

Tables ``llm_calls`` (one row per call: an intent written before the call, finished
after it) and ``llm_usage_daily`` (the roll-up reports and budgets read). Why an
intent first: a replica can die after the provider billed a call and before anything
was written. The intent is in PostgreSQL before the request leaves; :meth:`finish`
closes it and adds it to the day's roll-up in ONE statement; :meth:`reconcile` closes
intents nobody finished (their replica died) at their reservation, also in one
statement. Each intent is closed exactly once (``finished_at IS NULL`` guards both),
so every call that may have been billed is counted, and counted once.

Budgets: :meth:`begin` checks the tenant's (and end user's) use of the window plus
the reservations of calls in flight, under a per-(tenant, group) advisory lock, and
inserts the intent in the same transaction. Calls are admitted one at a time per
tenant and group across all replicas, each reserving prompt + max_tokens, so the
counted use can pass a budget by at most the one call admitted just under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

GROUPS = ("background", "chat")
PURPOSES = ("extract", "summarize", "consolidate", "infer", "chat", "rerank")
SCOPES = ("tenant_daily", "tenant_monthly", "user_daily")
GROUP_BY = ("day", "user", "purpose", "model")
_COLUMN = {"day": "day", "user": "user_id", "purpose": "purpose", "model": "model"}
_SUMS = (
    "calls",
    "errors",
    "estimated_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
)


def group_of(purpose: str) -> str:
    """A request-path call (the chat proxy, a search's re-scoring) spends the ``chat``
    budgets; what runs in the background spends the ``background`` ones."""
    return "chat" if purpose in ("chat", "rerank") else "background"


@dataclass(frozen=True)
class Limits:
    """Token budgets of one purpose group; 0: none."""

    tenant_daily: int = 0
    tenant_monthly: int = 0
    user_daily: int = 0

    @property
    def any(self) -> bool:
        return bool(self.tenant_daily or self.tenant_monthly or self.user_daily)


@dataclass(frozen=True)
class CallTag:
    """Who a call is for and why (the metering key, with the model and the day)."""

    tenant_id: str
    user_id: str | None
    purpose: str

    @property
    def group(self) -> str:
        return group_of(self.purpose)


@dataclass(frozen=True)
class Used:
    """Tokens of a group counted in the current windows (finished + reserved)."""

    tenant_daily: int
    tenant_monthly: int
    user_daily: int


def next_day(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), time(), UTC)


def next_month(day: date) -> datetime:
    first = day.replace(day=1) + timedelta(days=32)
    return datetime.combine(first.replace(day=1), time(), UTC)


def window_end(scope: str, day: date) -> datetime:
    return next_month(day) if scope == "tenant_monthly" else next_day(day)


class OverBudget(Exception):
    """A call refused: the group's budget of this window is spent (raised before the call)."""

    def __init__(self, tag: CallTag, scopes: list[str], day: date) -> None:
        self.tag = tag
        self.scopes = scopes
        # Work resumes when every exhausted window has rolled over (or a budget is raised).
        self.resumes_at = max(window_end(s, day) for s in scopes)
        super().__init__(
            f"{tag.group} token budget spent ({', '.join(scopes)}) "
            f"until {self.resumes_at.isoformat()}"
        )


_USED_SQL = """
SELECT coalesce(sum(n) FILTER (WHERE day = %(day)s), 0) AS tenant_daily,
       coalesce(sum(n), 0) AS tenant_monthly,
       coalesce(sum(n) FILTER (WHERE day = %(day)s AND user_id = %(u)s), 0) AS user_daily
FROM (SELECT day, user_id, prompt_tokens + completion_tokens AS n FROM llm_usage_daily
      WHERE tenant_id = %(t)s AND grp = %(g)s AND day >= %(month)s AND day <= %(day)s
      UNION ALL
      SELECT day, user_id, reserved FROM llm_calls
      WHERE tenant_id = %(t)s AND grp = %(g)s AND finished_at IS NULL
            AND day >= %(month)s) x
"""
_ROLLUP = """
INSERT INTO llm_usage_daily AS d (tenant_id, user_id, day, purpose, grp, model, calls, errors,
    estimated_calls, prompt_tokens, completion_tokens, cached_tokens, latency_ms)
SELECT tenant_id, user_id, day, purpose, grp, model, count(*),
       count(*) FILTER (WHERE outcome <> 'ok'), count(*) FILTER (WHERE estimated),
       sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens), sum(latency_ms)
FROM closed GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 3, 5, 2, 4, 6
ON CONFLICT (tenant_id, day, grp, user_id, purpose, model) DO UPDATE SET
    calls = d.calls + EXCLUDED.calls, errors = d.errors + EXCLUDED.errors,
    estimated_calls = d.estimated_calls + EXCLUDED.estimated_calls,
    prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,
    completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,
    cached_tokens = d.cached_tokens + EXCLUDED.cached_tokens,
    latency_ms = d.latency_ms + EXCLUDED.latency_ms
"""
_FINISH_SQL = (
    "WITH closed AS (UPDATE llm_calls SET finished_at = now(), outcome = %(outcome)s,"
    " prompt_tokens = %(prompt)s, completion_tokens = %(completion)s,"
    " cached_tokens = %(cached)s, estimated = %(estimated)s, latency_ms = %(ms)s"
    " WHERE id = %(id)s AND finished_at IS NULL RETURNING *)" + _ROLLUP
)
_RECONCILE_SQL = (
    "WITH closed AS (UPDATE llm_calls SET finished_at = now(), outcome = 'lost',"
    " prompt_tokens = est_prompt, completion_tokens = reserved - est_prompt, estimated = true"
    " WHERE id IN (SELECT id FROM llm_calls WHERE finished_at IS NULL"
    " AND started_at < now() - %(stale)s * interval '1 second'"
    " ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING *)" + _ROLLUP
)


@dataclass(frozen=True)
class Spent:
    """What a finished call used (from the response's ``usage``, or estimated)."""

    outcome: str  # ok | an error kind
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False
    latency_ms: float = 0.0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class SpendStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @staticmethod
    async def _used(conn: AsyncConnection, tag: CallTag, day: date) -> Used:
        cur = await conn.execute(
            _USED_SQL,
            {
                "t": tag.tenant_id,
                "g": tag.group,
                "u": tag.user_id or "",
                "day": day,
                "month": day.replace(day=1),
            },
        )
        row = await cur.fetchone()
        return Used(int(row["tenant_daily"]), int(row["tenant_monthly"]), int(row["user_daily"]))

    async def used(self, tag: CallTag, day: date) -> Used:
        async with self.pool.connection() as conn:
            return await self._used(conn, tag, day)

    async def begin(
        self, tag: CallTag, model: str, day: date, est_prompt: int, reserve: int, limits: Limits
    ) -> tuple[int, Used | None]:
        """Insert the call's intent (reserving ``reserve`` tokens); returns its id and the
        use before it (None without budgets). Raises :class:`OverBudget`, writing nothing."""
        params = {
            "t": tag.tenant_id,
            "u": tag.user_id or "",
            "p": tag.purpose,
            "g": tag.group,
            "m": model[:200],
            "day": day,
            "res": reserve,
            "est": est_prompt,
        }
        used = None
        async with self.pool.connection() as conn, conn.transaction():
            if limits.any:  # one admission at a time per tenant and group, every replica
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"memserve:spend:{tag.tenant_id}:{tag.group}",),
                )
                used = await self._used(conn, tag, day)
                if scopes := [
                    s for s in SCOPES if (c := getattr(limits, s)) and getattr(used, s) >= c
                ]:
                    raise OverBudget(tag, scopes, day)
            cur = await conn.execute(
                "INSERT INTO llm_calls (tenant_id, user_id, purpose, grp, model, day,"
                " reserved, est_prompt) VALUES (%(t)s, %(u)s, %(p)s, %(g)s, %(m)s, %(day)s,"
                " %(res)s, %(est)s) RETURNING id",
                params,
            )
            return (await cur.fetchone())["id"], used

    async def finish(self, call_id: int, spent: Spent) -> bool:
        """Close the intent and add it to its day's roll-up, in one statement; False when
        it was already closed (the reconciler counted it as lost)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                _FINISH_SQL,
                {
                    "id": call_id,
                    "outcome": spent.outcome[:40],
                    "prompt": spent.prompt_tokens,
                    "completion": spent.completion_tokens,
                    "cached": spent.cached_tokens,
                    "estimated": spent.estimated,
                    "ms": spent.latency_ms,
                },
            )
            return cur.rowcount > 0

    async def reconcile(self, stale_s: float, limit: int = 1000) -> int:
        """Close up to ``limit`` intents older than ``stale_s`` (their replica died) as
        'lost', counted at their reservation (an upper bound: estimated prompt + max_tokens)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RECONCILE_SQL, {"stale": stale_s, "limit": limit})
            return cur.rowcount

    async def prune(self, raw_days: float, daily_days: int, batch: int = 10_000) -> int:
        """Drop finished per-call rows, daily rows and alerts past retention (bounded)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM llm_calls WHERE id IN (SELECT id FROM llm_calls"
                " WHERE finished_at IS NOT NULL"
                " AND started_at < now() - %(raw)s * interval '1 day' LIMIT %(n)s)",
                {"raw": raw_days, "n": batch},
            )
            n = cur.rowcount
            cur = await conn.execute(
                "DELETE FROM llm_usage_daily WHERE ctid IN (SELECT ctid FROM llm_usage_daily"
                " WHERE day < current_date - %(days)s LIMIT %(n)s)",
                {"days": daily_days, "n": batch},
            )
            n += cur.rowcount
            await conn.execute("DELETE FROM llm_budget_alerts WHERE win < current_date - 62")
            return n

    async def first_alert(self, tag: CallTag, scope: str, win: date) -> bool:
        """Record the soft-threshold alert of a window; True only for the first raiser."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO llm_budget_alerts (tenant_id, grp, scope, win)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (tag.tenant_id, tag.group, scope, win),
            )
            return cur.rowcount > 0

    async def report(
        self,
        tenant_id: str,
        group_by: list[str],
        since: date,
        until: date,
        *,
        user_id: str | None = None,
        limit: int,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Sums per the ``group_by`` columns (any of :data:`GROUP_BY`) over the days
        ``since``..``until`` (inclusive), ordered by those columns (day newest first)."""
        cols = [_COLUMN[g] for g in group_by]
        select = "".join(f"{c}::text AS {c}, " for c in cols)
        sums = ", ".join(f"sum({k})::bigint AS {k}" for k in _SUMS)
        order = ", ".join(f"{c} DESC" if c == "day" else c for c in cols) or "1"
        sql = (
            f"SELECT {select}{sums},"
            " round(coalesce(sum(latency_ms), 0)::numeric, 1)::float AS latency_ms"
            " FROM llm_usage_daily WHERE tenant_id = %(t)s AND day BETWEEN %(a)s AND %(b)s"
            " AND (%(u)s::text IS NULL OR user_id = %(u)s)"
            + (f" GROUP BY {', '.join(cols)} ORDER BY {order}" if cols else "")
            + " LIMIT %(limit)s OFFSET %(offset)s"
        )
        async with self.pool.connection() as conn:
            params = {
                "t": tenant_id,
                "a": since,
                "b": until,
                "u": user_id,
                "limit": limit,
                "offset": offset,
            }
            cur = await conn.execute(sql, params)
            rows = await cur.fetchall()
        return [{**r, **{k: r[k] or 0 for k in _SUMS}} for r in rows]

    async def top_users(
        self, tenant_id: str, since: date, until: date, n: int
    ) -> list[dict[str, Any]]:
        """The ``n`` end users who spent the most tokens in the range."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT user_id, sum(calls)::bigint AS calls,"
                " sum(prompt_tokens + completion_tokens)::bigint AS total_tokens,"
                " sum(prompt_tokens)::bigint AS prompt_tokens,"
                " sum(completion_tokens)::bigint AS completion_tokens"
                " FROM llm_usage_daily WHERE tenant_id = %(t)s AND day BETWEEN %(a)s AND %(b)s"
                " AND user_id <> '' GROUP BY user_id ORDER BY total_tokens DESC, user_id"
                " LIMIT %(n)s",
                {"t": tenant_id, "a": since, "b": until, "n": n},
            )
            return await cur.fetchall()
