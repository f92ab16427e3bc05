"""What each API key spent through the chat proxy, per day (table ``chat_usage``).

Counted per key so an operator sees who spends the upstream key: requests
forwarded, requests refused by the proxy's caps, and the upstream's reported
prompt/completion tokens. One upsert per chat call, off the answer's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool


@dataclass(frozen=True)
class Usage:
    requests: int = 0
    refused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatUsageStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def add(self, key_id: str, tenant_id: str, usage: Usage) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO chat_usage AS u (key_id, tenant_id, day, requests, refused,"
                " prompt_tokens, completion_tokens) VALUES (%(key_id)s, %(tenant_id)s,"
                " current_date, %(requests)s, %(refused)s, %(prompt)s, %(completion)s)"
                " ON CONFLICT (key_id, day) DO UPDATE SET"
                " requests = u.requests + EXCLUDED.requests,"
                " refused = u.refused + EXCLUDED.refused,"
                " prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,"
                " completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens",
                {
                    "key_id": key_id,
                    "tenant_id": tenant_id,
                    "requests": usage.requests,
                    "refused": usage.refused,
                    "prompt": usage.prompt_tokens,
                    "completion": usage.completion_tokens,
                },
            )

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
