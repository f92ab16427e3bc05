"""The short-term buffer (``session_turns``), which is also the durable extraction queue.

A turn with ``extracted_at IS NULL`` is pending. Extraction claims a session's
pending turns with a lease (``claimed_until``) so replicas never share work and
a crashed replica's claim simply runs out; success stamps ``extracted_at``,
a transient failure releases the claim, so no turn is lost. Claims carry a
token (only its holder finishes or releases the turns); a failed attempt is
counted and backs off (``retry_at``); after too many the batch is dead-lettered
(``dead_at``), kept until an admin retries it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store import erasure
from serve_app.store.records import Owner, unclaimed


@dataclass(frozen=True)
class SessionKey:
    tenant_id: str
    user_id: str
    session_id: str

    @property
    def owner(self) -> Owner:
        return Owner(self.tenant_id, self.user_id)

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.tenant_id, self.user_id, self.session_id)

    def params(self, **more: Any) -> dict[str, Any]:
        """Named parameters ``t``, ``u``, ``s`` (and ``more``) for the statements below."""
        return {"t": self.tenant_id, "u": self.user_id, "s": self.session_id, **more}


@dataclass(frozen=True)
class Speaker:
    """Who said a turn: its ``name`` (OpenAI's message field) and the platform user of the
    session's tenant who said it (a group session); both None: the session's user (or
    the assistant, by role)."""

    name: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class TurnCounts:
    turns: int
    pending: int  # not yet extracted
    failed: int  # extracted with an error
    compressed: int


@dataclass(frozen=True)
class Appended:
    first_index: int
    last_index: int
    pending_user_turns: int  # user turns of the session not yet extracted (the trigger)


_SESSION = "tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s"
INFER_PREFIX = "infer-"  # POST /v1/memories infer jobs; the caller's session: meta.session_id


def _claimable(t: str = "") -> str:
    """Not held by a live claim and not waiting out a retry backoff (``t``: alias prefix)."""
    return unclaimed(t) + f" AND ({t}retry_at IS NULL OR {t}retry_at <= now())"


_CLAIMABLE = _claimable()
_CLAIMABLE_T = _claimable("t.")

_APPEND_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended(%(t)s || '/' || %(u)s || '/' || %(s)s, 7))"
)
_APPEND_SQL = """
WITH base AS (
    SELECT coalesce(max(turn_index), 0) AS n,
           count(*) FILTER (WHERE extracted_at IS NULL AND role = 'user') AS pending
    FROM session_turns WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s
), ins AS (
    INSERT INTO session_turns (tenant_id, user_id, session_id, agent_id, turn_index, role,
                               content, expires_at, meta, occurred_at, speaker_name, speaker_id)
    SELECT %(t)s, %(u)s, %(s)s, %(agent)s, base.n + m.ord, m.role, m.content,
           now() + %(ttl)s::interval, %(meta)s, coalesce(m.occurred_at, now()), m.name,
           m.speaker
    FROM base, unnest(%(roles)s::text[], %(contents)s::text[], %(occurred)s::timestamptz[],
                      %(names)s::text[], %(speakers)s::text[])
         WITH ORDINALITY AS m(role, content, occurred_at, name, speaker, ord)
    RETURNING role
), reopen AS (  -- a data-modifying CTE runs to completion even though nothing reads it
    UPDATE session_state SET ended_at = NULL, updated_at = now()
    WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s AND ended_at IS NOT NULL
)
SELECT base.n AS last,
       base.pending + (SELECT count(*) FROM ins WHERE role = 'user') AS pending
FROM base
"""


def _begin_work(key: SessionKey, rows: list[dict]) -> None:
    """Reading turns to extract or summarise starts extraction work: the task's later
    memory/fact writes are void if the owner is forgotten meanwhile (store.erasure); an
    ``infer`` job's work is its caller's session, which its memories carry."""
    if rows:
        session = key.session_id
        if session.startswith(INFER_PREFIX):
            session = (rows[0].get("meta") or {}).get("session_id") or session
        erasure.begin_work(key.tenant_id, key.user_id, session, rows[0]["read_at"])


class TurnStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def append(
        self,
        key: SessionKey,
        messages: Sequence[tuple[str, str]],
        *,
        agent_id: str | None,
        ttl_hours: float,
        meta: dict[str, Any] | None = None,
        occurred_at: Sequence[datetime | None] | None = None,
        speakers: Sequence[Speaker] | None = None,
    ) -> Appended:
        """Append (role, content) messages with consecutive turn indexes.

        ``occurred_at``: when each message was said (the client's clock, per message;
        None: the server's), shown to extraction so relative dates can be resolved.
        ``speakers``: who said each message (its ``name``, and the platform user of the
        tenant who said it); None: the session's user and the assistant.

        The session's lock (serialises its appends: retrying unique-index collisions
        failed with 8-10 at once), then one statement: next indexes, the insert, the
        pending count (extraction's trigger) and re-opening an ended session.
        """
        roles = [r for r, _ in messages]
        contents = [c for _, c in messages]
        occurred = list(occurred_at) if occurred_at is not None else [None] * len(messages)
        if len(occurred) != len(messages):
            raise ValueError(f"{len(messages)} messages but {len(occurred)} occurred_at")
        said_by = list(speakers) if speakers is not None else [Speaker()] * len(messages)
        if len(said_by) != len(messages):
            raise ValueError(f"{len(messages)} messages but {len(said_by)} speakers")
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(_APPEND_LOCK, key.params())
            cur = await conn.execute(
                _APPEND_SQL,
                key.params(
                    agent=agent_id,
                    roles=roles,
                    contents=contents,
                    ttl=f"{ttl_hours} hours",
                    meta=Jsonb(meta or {}),
                    occurred=occurred,
                    names=[s.name for s in said_by],
                    speakers=[s.user_id for s in said_by],
                ),
            )
            row = await cur.fetchone()
        last = row["last"]
        return Appended(last + 1, last + len(messages), row["pending"])

    async def end(self, key: SessionKey, agent_id: str | None = None) -> int:
        """Mark the session ended (it is then extracted and summarised in full)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH ended AS (INSERT INTO session_state"
                " (tenant_id, user_id, session_id, agent_id, ended_at)"
                " VALUES (%(t)s, %(u)s, %(s)s, %(agent)s, now())"
                " ON CONFLICT (tenant_id, user_id, session_id)"
                " DO UPDATE SET ended_at = now(), updated_at = now())"
                " SELECT count(*) AS n FROM session_turns WHERE "
                + _SESSION
                + " AND extracted_at IS NULL",
                key.params(agent=agent_id),
            )
            return (await cur.fetchone())["n"]

    async def is_ended(self, key: SessionKey) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT ended_at FROM session_state WHERE " + _SESSION, key.params()
            )
            row = await cur.fetchone()
        return bool(row and row["ended_at"])

    async def claim_pending(self, key: SessionKey, limit: int, lease_s: float) -> list[dict]:
        """Claim up to ``limit`` oldest pending turns of the session (skips others' claims).

        Every row carries the claim's ``claim_token``: :meth:`mark_extracted` and
        :meth:`release` only touch turns still held under that token.
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH token AS (SELECT gen_random_uuid() AS t)"
                " UPDATE session_turns SET claim_token = (SELECT t FROM token),"
                " claimed_until = now() + %(lease)s * interval '1 second'"
                " WHERE id IN (SELECT id FROM session_turns WHERE "
                + _SESSION
                + " AND extracted_at IS NULL AND "
                + _CLAIMABLE
                + " ORDER BY turn_index LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
                " RETURNING id, agent_id, turn_index, role, content, extract_attempts, meta,"
                " claim_token, occurred_at, speaker_name, speaker_id, now() AS read_at",
                key.params(lease=lease_s, limit=limit),
            )
            rows = await cur.fetchall()
        _begin_work(key, rows)
        return sorted(rows, key=lambda r: r["turn_index"])

    async def mark_extracted(
        self, ids: Sequence[int], error: str | None = None, *, claim: uuid.UUID | None = None
    ) -> int:
        """Stamp turns extracted (``error``: dead-lettered, kept for an admin retry).

        With ``claim``, only turns still held under that token change (an expired
        claim taken over by another replica is not finished twice); returns how many.
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET extracted_at = now(), claimed_until = NULL,"
                " claim_token = NULL, extract_error = %(error)s,"
                " dead_at = CASE WHEN %(error)s::text IS NULL THEN NULL ELSE now() END"
                " WHERE id = ANY(%(ids)s) AND extracted_at IS NULL"
                " AND (%(claim)s::uuid IS NULL OR claim_token = %(claim)s)",
                {"error": error, "ids": list(ids), "claim": claim},
            )
            return cur.rowcount

    async def release(
        self,
        ids: Sequence[int],
        *,
        failed_attempt: bool = False,
        claim: uuid.UUID | None = None,
        retry_after_s: float = 0.0,
    ) -> int:
        """Release the claim; ``failed_attempt`` counts it (returns the highest count).

        ``retry_after_s`` keeps the turns out of claims and scans for a while (backoff),
        so a batch that keeps failing cannot crowd out other sessions.
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET claimed_until = NULL, claim_token = NULL,"
                " extract_attempts = extract_attempts + %(add)s,"
                " retry_at = CASE WHEN %(after)s > 0"
                " THEN now() + %(after)s * interval '1 second' END"
                " WHERE id = ANY(%(ids)s) AND extracted_at IS NULL"
                " AND (%(claim)s::uuid IS NULL OR claim_token = %(claim)s)"
                " RETURNING extract_attempts",
                {
                    "add": 1 if failed_attempt else 0,
                    "ids": list(ids),
                    "claim": claim,
                    "after": float(retry_after_s),
                },
            )
            rows = await cur.fetchall()
        return max((r["extract_attempts"] for r in rows), default=0)

    async def fail(
        self,
        ids: Sequence[int],
        *,
        claim: uuid.UUID | None,
        error: str,
        max_attempts: int,
        retry_after_s: float,
    ) -> tuple[int, bool]:
        """Count a failed attempt on claimed turns: back off, or dead-letter them at
        ``max_attempts`` (kept with ``error`` until an admin retries); (attempts, dead)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET extract_attempts = extract_attempts + 1,"
                " claimed_until = NULL, claim_token = NULL,"
                " retry_at = CASE WHEN extract_attempts + 1 < %(max)s"
                " THEN now() + %(after)s * interval '1 second' END,"
                " extracted_at = CASE WHEN extract_attempts + 1 >= %(max)s THEN now() END,"
                " dead_at = CASE WHEN extract_attempts + 1 >= %(max)s THEN now() END,"
                " extract_error = CASE WHEN extract_attempts + 1 >= %(max)s THEN %(error)s END"
                " WHERE id = ANY(%(ids)s) AND extracted_at IS NULL"
                " AND (%(claim)s::uuid IS NULL OR claim_token = %(claim)s)"
                " RETURNING extract_attempts, dead_at",
                {
                    "ids": list(ids),
                    "claim": claim,
                    "error": error[:500],
                    "max": max_attempts,
                    "after": float(retry_after_s),
                },
            )
            rows = await cur.fetchall()
        attempts = max((r["extract_attempts"] for r in rows), default=0)
        return attempts, any(r["dead_at"] is not None for r in rows)

    async def uncompressed(self, key: SessionKey) -> list[dict]:
        """Turns not yet summarised, oldest first (extracted ones only: extraction goes first)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, turn_index, role, content, extracted_at, dead_at, occurred_at,"
                " speaker_name, speaker_id, now() AS read_at"
                " FROM session_turns WHERE " + _SESSION + " AND compressed_at IS NULL"
                " ORDER BY turn_index",
                key.params(),
            )
            rows = await cur.fetchall()
        _begin_work(key, rows)
        return rows

    async def mark_compressed(self, ids: Sequence[int]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE session_turns SET compressed_at = now() WHERE id = ANY(%(ids)s)",
                {"ids": list(ids)},
            )

    async def due_sessions(
        self,
        every_n: int,
        idle_s: float,
        limit: int = 200,
        per_user: int = 2,
        *,
        summaries: bool = True,
    ) -> list[SessionKey]:
        """Sessions whose pending turns should be extracted now, in a fair order.

        Due: N or more pending user turns, or the session ended, or the oldest
        pending turn waited ``idle_s`` (nothing stays in the queue forever); turns
        in a retry backoff wait. Also an ended session whose turns are all extracted
        but not yet summarised (at least two: what the summary takes): its summary was
        held back (a budget spent) and runs once it may; only with ``summaries`` (a
        pipeline without an LLM writes none, so they would be listed for ever), and after
        every session with turns to extract, so owed summaries never take their places
        in the ``limit``. Order: round-robin over tenants, and within a tenant over users
        (each user's oldest session first, at most ``per_user`` of a user per scan), so
        one user's or tenant's backlog never starves others.
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH due AS (SELECT t.tenant_id, t.user_id, t.session_id,"
                " min(t.created_at) AS oldest, 0 AS owed FROM session_turns t"
                " LEFT JOIN session_state s USING (tenant_id, user_id, session_id)"
                " WHERE t.extracted_at IS NULL AND "
                + _CLAIMABLE_T
                + " GROUP BY t.tenant_id, t.user_id, t.session_id, s.ended_at"
                " HAVING count(*) FILTER (WHERE t.role = 'user') >= %(every_n)s"
                " OR s.ended_at IS NOT NULL"
                " OR min(t.created_at) < now() - %(idle_s)s * interval '1 second'"
                " UNION SELECT t.tenant_id, t.user_id, t.session_id, min(t.created_at), 1"
                " FROM session_turns t JOIN session_state s USING (tenant_id, user_id, session_id)"
                " WHERE %(summaries)s AND s.ended_at IS NOT NULL AND t.extracted_at IS NOT NULL"
                " AND t.compressed_at IS NULL AND t.dead_at IS NULL"
                " AND NOT starts_with(t.session_id, %(infer)s)"
                " AND NOT EXISTS (SELECT 1 FROM session_turns p WHERE p.tenant_id = t.tenant_id"
                " AND p.user_id = t.user_id AND p.session_id = t.session_id"
                " AND p.extracted_at IS NULL AND p.dead_at IS NULL)"
                " GROUP BY t.tenant_id, t.user_id, t.session_id HAVING count(*) >= 2),"
                " per_user AS (SELECT *, row_number() OVER (PARTITION BY tenant_id, user_id"
                " ORDER BY owed, oldest) AS nth FROM due),"
                " capped AS (SELECT *, min(oldest) OVER (PARTITION BY tenant_id, user_id)"
                " AS user_oldest FROM per_user WHERE nth <= %(per_user)s),"
                " per_tenant AS (SELECT *, row_number() OVER (PARTITION BY tenant_id"
                " ORDER BY nth, user_oldest, user_id) AS turn FROM capped)"
                " SELECT tenant_id, user_id, session_id FROM per_tenant"
                " ORDER BY owed, turn, oldest LIMIT %(limit)s",
                {
                    "every_n": every_n,
                    "idle_s": idle_s,
                    "limit": limit,
                    "per_user": per_user,
                    "infer": INFER_PREFIX,
                    "summaries": summaries,
                },
            )
            rows = await cur.fetchall()
        return [SessionKey(r["tenant_id"], r["user_id"], r["session_id"]) for r in rows]

    async def dead_letters(
        self, tenant_id: str, user_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Dead-lettered batches of the tenant (optionally one user), newest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT user_id, session_id, count(*) AS turns, min(turn_index) AS first_turn,"
                " max(turn_index) AS last_turn, max(extract_attempts) AS attempts,"
                " max(dead_at) AS dead_at, (array_agg(extract_error ORDER BY turn_index))[1]"
                " AS error FROM session_turns WHERE tenant_id = %(t)s AND dead_at IS NOT NULL"
                " AND (%(u)s::text IS NULL OR user_id = %(u)s)"
                " GROUP BY user_id, session_id ORDER BY max(dead_at) DESC LIMIT %(limit)s",
                {"t": tenant_id, "u": user_id, "limit": limit},
            )
            return await cur.fetchall()

    async def retry_dead(
        self, tenant_id: str, user_id: str | None = None, session_id: str | None = None
    ) -> list[SessionKey]:
        """Put dead-lettered turns back in the queue with fresh attempts; their sessions."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET extracted_at = NULL, dead_at = NULL,"
                " extract_error = NULL, extract_attempts = 0, retry_at = NULL,"
                " claimed_until = NULL, claim_token = NULL"
                " WHERE tenant_id = %(t)s AND dead_at IS NOT NULL"
                " AND (%(u)s::text IS NULL OR user_id = %(u)s)"
                " AND (%(s)s::text IS NULL OR session_id = %(s)s)"
                " RETURNING user_id, session_id",
                {"t": tenant_id, "u": user_id, "s": session_id},
            )
            rows = await cur.fetchall()
        keys = {SessionKey(tenant_id, r["user_id"], r["session_id"]) for r in rows}
        return sorted(keys, key=lambda k: k.as_tuple())

    async def purge_expired(self) -> int:
        """Drop expired turns, but never one still waiting for extraction."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM session_turns WHERE expires_at < now() AND extracted_at IS NOT NULL"
                " AND dead_at IS NULL"
            )
            return cur.rowcount

    async def pending_count(self, key: SessionKey | None = None) -> int:
        async with self.pool.connection() as conn:
            if key is None:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM session_turns WHERE extracted_at IS NULL"
                )
            else:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM session_turns WHERE "
                    + _SESSION
                    + " AND extracted_at IS NULL",
                    key.params(),
                )
            return (await cur.fetchone())["n"]

    async def status(self, key: SessionKey) -> TurnCounts:
        """Where the session's turns stand in extraction (all zero: no such session)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS turns,"
                " count(*) FILTER (WHERE extracted_at IS NULL) AS pending,"
                " count(*) FILTER (WHERE extract_error IS NOT NULL) AS failed,"
                " count(*) FILTER (WHERE compressed_at IS NOT NULL) AS compressed"
                " FROM session_turns WHERE " + _SESSION,
                key.params(),
            )
            row = await cur.fetchone()
        return TurnCounts(row["turns"], row["pending"], row["failed"], row["compressed"])
