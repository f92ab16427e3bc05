"""What each API key spent through the chat proxy, per day (table ``chat_usage``).

Counted per key so an operator sees who spends the upstream key: requests
forwarded, requests refused by the proxy's caps, and the upstream's reported
prompt/completion tokens. The meter (``serve_app.services.chat_usage``) sums calls
in memory and writes them here in batches: one upsert statement per flush.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from psycopg_pool import AsyncConnectionPool

KINDS = ("requests", "refused", "prompt_tokens", "completion_tokens")

# Deltas add to the day's row; rows arrive sorted by (key, day) so two replicas'
# flushes lock rows in the same order (no deadlock).
_ADD_SQL = (
    "INSERT INTO chat_usage AS u (key_id, tenant_id, day, requests, refused,"
    " prompt_tokens, completion_tokens)"
    " SELECT * FROM unnest(%(keys)s::uuid[], %(tenants)s::text[], %(days)s::date[],"
    " %(requests)s::bigint[], %(refused)s::bigint[], %(prompt)s::bigint[],"
    " %(completion)s::bigint[])"
    " ON CONFLICT (key_id, day) DO UPDATE SET"
    " requests = u.requests + EXCLUDED.requests,"
    " refused = u.refused + EXCLUDED.refused,"
    " prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,"
    " completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens"
)


@dataclass(frozen=True)
class Usage:
    requests: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, k) + getattr(other, k) for k in KINDS))


@dataclass(frozen=True)
class UsageDelta:
    """What one key spent on one day since the last flush."""

    key_id: str
    tenant_id: str
    day: date
    usage: Usage


class ChatUsageStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def add(self, deltas: list[UsageDelta]) -> None:
        """Add the deltas to their (key, day) rows in one statement (keys must be unique)."""
        if not deltas:
            return
        rows = sorted(deltas, key=lambda d: (d.key_id, d.day))
        params = {
            "keys": [d.key_id for d in rows],
            "tenants": [d.tenant_id for d in rows],
            "days": [d.day for d in rows],
            "requests": [d.usage.requests for d in rows],
            "refused": [d.usage.refused for d in rows],
            "prompt": [d.usage.prompt_tokens for d in rows],
            "completion": [d.usage.completion_tokens for d in rows],
        }
        async with self.pool.connection() as conn:
            await conn.execute(_ADD_SQL, params)

    async def list(self, tenant_id: str, key_id: str | None = None) -> list[dict[str, Any]]:
        """Per key and day, newest first: one key's rows, or the tenant's (key_id None)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT key_id::text AS key_id, day::text AS day, requests, refused,"
                " prompt_tokens, completion_tokens FROM chat_usage"
                " WHERE tenant_id = %(tenant_id)s"
                " AND (%(key_id)s::uuid IS NULL OR key_id = %(key_id)s::uuid)"
                " ORDER BY day DESC, key_id LIMIT 1000",
                {"tenant_id": tenant_id, "key_id": key_id},
            )
            return await cur.fetchall()
