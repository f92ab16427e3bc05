"""``trusted_issuers`` (migration 0020): which tenant trusts an issuer for an audience.

The rows are kept by a trigger on ``tenant_settings`` from each tenant's
``identity.issuers``, so they change only with the settings (and notify with them on
``memserve_tenants``). Reads only here.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool


class IssuerIndex:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def tenants(self, issuer: str, audiences: Sequence[str]) -> list[str]:
        """The tenants that trust ``issuer`` for any of ``audiences`` (distinct, sorted)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT tenant_id FROM trusted_issuers"
                " WHERE issuer = %(i)s AND audience = ANY(%(a)s) ORDER BY tenant_id",
                {"i": issuer, "a": list(audiences)},
            )
            return [row["tenant_id"] for row in await cur.fetchall()]
