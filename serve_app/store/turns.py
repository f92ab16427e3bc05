"""The short-term buffer (``session_turns``), which is also the durable extraction queue.

A turn with ``extracted_at IS NULL`` is pending. Extraction claims a session's
pending turns with a lease (``claimed_until``) so replicas never share work and
a crashed replica's claim simply runs out; success stamps ``extracted_at``,
a transient failure releases the claim, so no turn is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.errors import UniqueViolation
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import Owner


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
class TurnCounts:
    turns: int
    pending: int  # not yet extracted
    failed: int  # extracted with an error
    compressed: int


@dataclass(frozen=True)
class Appended:
    first_index: int
    last_index: int
    pending_user_turns: int  # user turns of the session not yet extracted
    uncompressed_turns: int


_SESSION = "tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s"

_APPEND_SQL = """
WITH base AS (
    SELECT coalesce(max(turn_index), 0) AS n,
           count(*) FILTER (WHERE extracted_at IS NULL AND role = 'user') AS pending,
           count(*) FILTER (WHERE compressed_at IS NULL) AS uncompressed
    FROM session_turns WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s
), ins AS (
    INSERT INTO session_turns (tenant_id, user_id, session_id, agent_id, turn_index, role,
                               content, expires_at, meta)
    SELECT %(t)s, %(u)s, %(s)s, %(agent)s, base.n + m.ord, m.role, m.content,
           now() + %(ttl)s::interval, %(meta)s
    FROM base, unnest(%(roles)s::text[], %(contents)s::text[])
         WITH ORDINALITY AS m(role, content, ord)
    RETURNING role
), reopen AS (
    UPDATE session_state SET ended_at = NULL, updated_at = now()
    WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s AND ended_at IS NOT NULL
    RETURNING 1
)
SELECT base.n AS last,
       base.pending + (SELECT count(*) FROM ins WHERE role = 'user') AS pending,
       base.uncompressed + (SELECT count(*) FROM ins) AS uncompressed,
       (SELECT count(*) FROM reopen) AS reopened
FROM base
"""


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
    ) -> Appended:
        """Append (role, content) messages with consecutive turn indexes.

        One statement (one round trip: this is the chat path): next indexes, the
        insert, the counts and re-opening an ended session. Two concurrent
        appends to one session collide on the unique index; the loser retries.
        """
        roles = [r for r, _ in messages]
        contents = [c for _, c in messages]
        for attempt in range(5):
            try:
                async with self.pool.connection() as conn:
                    cur = await conn.execute(_APPEND_SQL, key.params(
                        agent=agent_id, roles=roles, contents=contents,
                        ttl=f"{ttl_hours} hours", meta=Jsonb(meta or {}),
                    ))  # fmt: skip
                    row = await cur.fetchone()
                break
            except UniqueViolation:
                if attempt == 4:
                    raise
        last = row["last"]
        return Appended(last + 1, last + len(messages), row["pending"], row["uncompressed"])

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
        """Claim up to ``limit`` oldest pending turns of the session (skips others' claims)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET claimed_until = now() + %(lease)s * interval '1 second'"
                " WHERE id IN (SELECT id FROM session_turns WHERE "
                + _SESSION
                + " AND extracted_at IS NULL AND (claimed_until IS NULL OR claimed_until < now())"
                " ORDER BY turn_index LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
                " RETURNING id, agent_id, turn_index, role, content, extract_attempts, meta",
                key.params(lease=lease_s, limit=limit),
            )
            rows = await cur.fetchall()
        return sorted(rows, key=lambda r: r["turn_index"])

    async def mark_extracted(self, ids: Sequence[int], error: str | None = None) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE session_turns SET extracted_at = now(), claimed_until = NULL,"
                " extract_error = %(error)s WHERE id = ANY(%(ids)s)",
                {"error": error, "ids": list(ids)},
            )

    async def release(self, ids: Sequence[int], *, failed_attempt: bool = False) -> int:
        """Release the claim; ``failed_attempt`` counts an unusable answer (returns the count)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_turns SET claimed_until = NULL,"
                " extract_attempts = extract_attempts + %(add)s WHERE id = ANY(%(ids)s)"
                " RETURNING extract_attempts",
                {"add": 1 if failed_attempt else 0, "ids": list(ids)},
            )
            rows = await cur.fetchall()
        return max((r["extract_attempts"] for r in rows), default=0)

    async def uncompressed(self, key: SessionKey) -> list[dict]:
        """Turns not yet summarised, oldest first (extracted ones only: extraction goes first)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, turn_index, role, content, extracted_at FROM session_turns"
                " WHERE " + _SESSION + " AND compressed_at IS NULL ORDER BY turn_index",
                key.params(),
            )
            return await cur.fetchall()

    async def mark_compressed(self, ids: Sequence[int]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE session_turns SET compressed_at = now() WHERE id = ANY(%(ids)s)",
                {"ids": list(ids)},
            )

    async def due_sessions(self, every_n: int, idle_s: float, limit: int = 200) -> list[SessionKey]:
        """Sessions whose pending turns should be extracted now.

        Due: N or more pending user turns, or the session ended, or the oldest
        pending turn waited ``idle_s`` (nothing stays in the queue forever).
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT t.tenant_id, t.user_id, t.session_id FROM session_turns t"
                " LEFT JOIN session_state s USING (tenant_id, user_id, session_id)"
                " WHERE t.extracted_at IS NULL"
                " AND (t.claimed_until IS NULL OR t.claimed_until < now())"
                " GROUP BY t.tenant_id, t.user_id, t.session_id, s.ended_at"
                " HAVING count(*) FILTER (WHERE t.role = 'user') >= %(every_n)s"
                " OR s.ended_at IS NOT NULL"
                " OR min(t.created_at) < now() - %(idle_s)s * interval '1 second'"
                " ORDER BY min(t.created_at) LIMIT %(limit)s",
                {"every_n": every_n, "idle_s": idle_s, "limit": limit},
            )
            rows = await cur.fetchall()
        return [SessionKey(r["tenant_id"], r["user_id"], r["session_id"]) for r in rows]

    async def purge_expired(self) -> int:
        """Drop expired turns, but never one still waiting for extraction."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM session_turns WHERE expires_at < now() AND extracted_at IS NOT NULL"
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
