"""Structured facts: one active value per (tenant, user, category, key), with history.

A new value replaces the active one only at greater-or-equal confidence; the
replaced row stays, inactive, with ``superseded_at``/``superseded_by``, so
``GET /v1/facts?include_inactive=true`` shows how a fact changed.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import Owner
from serve_app.text import normalize

FACT_COLUMNS = (
    "id, category, key, value, confidence, importance, active, source, session_id,"
    " created_at, updated_at, superseded_at, superseded_by"
)


class FactStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def upsert(
        self,
        owner: Owner,
        category: str,
        key: str,
        value: str,
        confidence: float,
        *,
        session_id: str | None = None,
        source: str = "extraction",
    ) -> str:
        """Apply one extracted fact; returns added | replaced | confirmed | ignored."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"fact:{owner.tenant_id}/{owner.user_id}/{category}/{key}",),
            )
            cur = await conn.execute(
                "SELECT id, value, confidence FROM facts WHERE tenant_id = %s AND user_id = %s"
                " AND category = %s AND key = %s AND active",
                (owner.tenant_id, owner.user_id, category, key),
            )
            active = await cur.fetchone()
            if active is not None and normalize(active["value"]) == normalize(value):
                await conn.execute(
                    "UPDATE facts SET confidence = greatest(confidence, %s), updated_at = now()"
                    " WHERE id = %s",
                    (confidence, active["id"]),
                )
                return "confirmed"
            if active is not None and confidence < active["confidence"]:
                return "ignored"
            new_id = uuid.uuid4()
            if active is not None:
                await conn.execute(
                    "UPDATE facts SET active = false, superseded_at = now(), superseded_by = %s,"
                    " updated_at = now() WHERE id = %s",
                    (new_id, active["id"]),
                )
            await conn.execute(
                "INSERT INTO facts (id, tenant_id, user_id, category, key, value, confidence,"
                " source, session_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                (
                    new_id,
                    owner.tenant_id,
                    owner.user_id,
                    category,
                    key,
                    value,
                    confidence,
                    source,
                    session_id,
                ),
            )
            return "added" if active is None else "replaced"

    async def list(self, owner: Owner, *, include_inactive: bool = False) -> list[dict[str, Any]]:
        """Active facts by category/key; with history, every version oldest first."""
        where = "" if include_inactive else " AND active"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {FACT_COLUMNS} FROM facts WHERE tenant_id = %s AND user_id = %s{where}"
                " ORDER BY category, key, created_at",
                (owner.tenant_id, owner.user_id),
            )
            return await cur.fetchall()
