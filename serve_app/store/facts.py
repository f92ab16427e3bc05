"""``facts``: one active value per (tenant, user, category, key), with history.

A new value replaces the active one only at greater-or-equal confidence, and an
extracted value never replaces one the user set explicitly (``source`` ``user``,
see ``EXPLICIT``); the replaced row stays, inactive, with ``superseded_at``/``superseded_by``, so
``GET /v1/facts?include_inactive=true`` shows how a fact changed. Context
building reads the active ones (one indexed query, no embedding).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.memory_index import using
from serve_app.store.records import Owner, column_list, valid

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


class FactStore:
    """Reads of a user's facts (the writer owns the writes: :mod:`serve_app.store.fact_writes`)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

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
