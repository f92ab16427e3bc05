"""Deterministic lookup of a user's active structured facts (no embedding, one indexed query)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

FACT_COLUMNS = "id, category, key, value, confidence, importance, updated_at"


class FactsReader:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def active(self, tenant_id: str, user_id: str, limit: int) -> list[dict[str, Any]]:
        """Active facts, most important first (ties: most confident, then by name)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {FACT_COLUMNS} FROM facts"
                " WHERE tenant_id = %s AND user_id = %s AND active"
                " ORDER BY importance DESC, confidence DESC, category, key LIMIT %s",
                (tenant_id, user_id, limit),
            )
            return await cur.fetchall()
