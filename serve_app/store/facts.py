"""``facts``: one active value per (tenant, user, category, key), with history.

A new value replaces the active one only at greater-or-equal confidence, and an
extracted value never replaces one the user set explicitly (``source`` ``user``,
see ``EXPLICIT``); the replaced row stays, inactive, with ``superseded_at``/``superseded_by``, so
``GET /v1/facts?include_inactive=true`` shows how a fact changed. Context
building reads the active ones (one indexed query, no embedding).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.memory_index import using
from serve_app.store.records import Owner, column_list, valid
from serve_app.text import normalize

# Where a page of facts ends: (category, key, created_at, id), the list's sort key.
FactKey = tuple[str, str, datetime, uuid.UUID]

FACT_COLUMNS: tuple[str, ...] = (
    "id",
    "category",
    "key",
    "value",
    "confidence",
    "importance",
    "active",
    "source",
    "session_id",
    "created_at",
    "updated_at",
    "superseded_at",
    "superseded_by",
    "valid_from",  # event time: when the value became true (None: unknown, created_at)
    "valid_until",  # when it stopped being true (its successor's valid_from)
)
# What a context block needs of a fact.
CONTEXT_FACT_COLUMNS: tuple[str, ...] = (*FACT_COLUMNS[:6], "updated_at")
EXPLICIT = "user"  # source of a value set through the API: extraction never overrides it
_FACT = "tenant_id = %(tenant_id)s AND user_id = %(user_id)s AND category = %(category)s"
# The writer's check, run under the key's lock: (conn, adds a new key?) -> an outcome that
# stops the write ("erased"), or None; it raises to refuse (quota).
FactGate = Callable[[AsyncConnection, bool], Awaitable[str | None]]


class FactStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def _raw_upsert(
        self,
        owner: Owner,
        category: str,
        key: str,
        value: str,
        confidence: float,
        *,
        gate: FactGate,
        session_id: str | None = None,
        source: str = "extraction",
        importance: float = 0.5,
        conn: AsyncConnection | None = None,
        valid_from: datetime | None = None,
    ) -> str:
        """Apply one fact; returns added | replaced | confirmed | ignored | erased.

        Source ``user`` (explicit) replaces whatever is active; other sources need
        greater-or-equal confidence and never replace an explicit value. ``gate`` (the
        erasure guard and quota of :class:`serve_app.store.guarded.GuardedWriter`) runs
        under the key's lock before anything is written.

        ``importance`` comes from the LLM; context blocks put facts >= 0.5 first."""
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "category": category,
            "key": key,
            "value": value,
            "confidence": confidence,
            "source": source,
            "session_id": session_id,
            "importance": importance,
        }
        async with using(self.pool, conn) as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))",
                {"lock": f"fact:{owner.tenant_id}/{owner.user_id}/{category}/{key}"},
            )
            cur = await conn.execute(
                "SELECT id, value, confidence, source FROM facts WHERE "
                + _FACT
                + " AND key = %(key)s AND active",
                params,
            )
            active = await cur.fetchone()
            stop = await gate(conn, active is None)
            if stop is not None:
                return stop
            explicit = source == EXPLICIT
            if active is not None and normalize(active["value"]) == normalize(value):
                await conn.execute(
                    "UPDATE facts SET confidence = greatest(confidence, %(confidence)s),"
                    " importance = %(importance)s, updated_at = now(),"
                    " source = CASE WHEN %(explicit)s THEN %(source)s ELSE source END"
                    " WHERE id = %(id)s",
                    {**params, "id": active["id"], "explicit": explicit},
                )
                return "confirmed"
            if (
                active is not None
                and not explicit
                and (confidence < active["confidence"] or active["source"] == EXPLICIT)
            ):
                return "ignored"
            params["id"] = uuid.uuid4()
            if active is not None:
                await conn.execute(  # valid until its successor became true
                    "UPDATE facts SET active = false, superseded_at = now(),"
                    " superseded_by = %(new_id)s, updated_at = now(),"
                    " valid_until = greatest(coalesce(%(valid_from)s, now()), valid_from)"
                    " WHERE id = %(id)s",
                    {"new_id": params["id"], "id": active["id"], "valid_from": valid_from},
                )
            await conn.execute(
                "INSERT INTO facts (id, tenant_id, user_id, category, key, value, confidence,"
                " source, session_id, importance, valid_from) VALUES (%(id)s, %(tenant_id)s,"
                " %(user_id)s, %(category)s, %(key)s, %(value)s, %(confidence)s, %(source)s,"
                " %(session_id)s, %(importance)s, %(valid_from)s)",
                {**params, "valid_from": valid_from},
            )
            return "added" if active is None else "replaced"

    async def _raw_delete(
        self, owner: Owner, category: str | None = None, key: str | None = None
    ) -> int:
        """Delete the user's facts (every version), optionally one category or one key."""
        where = [sql.SQL("tenant_id = %(tenant_id)s AND user_id = %(user_id)s")]
        params = {"tenant_id": owner.tenant_id, "user_id": owner.user_id}
        for column, value in (("category", category), ("key", key)):
            if value is not None:
                where.append(
                    sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
                )
                params[column] = value
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM facts WHERE {}").format(sql.SQL(" AND ").join(where)), params
            )
            return cur.rowcount

    async def get(
        self, owner: Owner, category: str, key: str, conn: AsyncConnection | None = None
    ) -> dict[str, Any] | None:
        """The active value of one fact (``conn``: read inside that transaction)."""
        async with using(self.pool, conn) as conn:
            cur = await conn.execute(
                sql.SQL(
                    "SELECT {} FROM facts WHERE " + _FACT + " AND key = %(key)s AND active"
                ).format(column_list(FACT_COLUMNS)),
                {
                    "tenant_id": owner.tenant_id,
                    "user_id": owner.user_id,
                    "category": category,
                    "key": key,
                },
            )
            return await cur.fetchone()

    async def list(
        self,
        owner: Owner,
        *,
        include_inactive: bool = False,
        as_of: datetime | None = None,
        category: str | None = None,
        limit: int = 1000,
        after: FactKey | None = None,
    ) -> list[dict[str, Any]]:
        """One page of facts by category/key (with history, every version oldest first;
        ``as_of``: the values valid at that time, one per key), after the ``after`` key.

        Paged because a fact's versions accumulate with every correction: an unpaged
        history read grew without bound."""
        which = " AND active"
        if include_inactive:
            which = ""
        if as_of is not None:
            which = " AND " + valid(at="%(as_of)s")
        if category is not None:
            which += " AND category = %(category)s"
        if after is not None:
            which += (
                " AND (category, key, created_at, id)"
                " > (%(a_category)s, %(a_key)s, %(a_created)s, %(a_id)s)"
            )
        query = sql.SQL(
            "SELECT {cols} FROM facts WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s"
            "{which} ORDER BY category, key, created_at, id LIMIT %(limit)s"
        ).format(cols=column_list(FACT_COLUMNS), which=sql.SQL(which))
        params: dict[str, Any] = {
            "tenant_id": owner.tenant_id,
            "user_id": owner.user_id,
            "as_of": as_of,
            "category": category,
            "limit": limit,
        }
        if after is not None:
            params.update(a_category=after[0], a_key=after[1], a_created=after[2], a_id=after[3])
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def active(self, tenant_id: str, user_id: str, limit: int) -> list[dict[str, Any]]:
        """Active facts for a context block, most important first (then most confident, name)."""
        query = sql.SQL(
            "SELECT {cols} FROM facts"
            " WHERE tenant_id = %(tenant_id)s AND user_id = %(user_id)s AND active"
            " ORDER BY importance DESC, confidence DESC, category, key LIMIT %(limit)s"
        ).format(cols=column_list(CONTEXT_FACT_COLUMNS))
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                query, {"tenant_id": tenant_id, "user_id": user_id, "limit": limit}
            )
            return await cur.fetchall()
