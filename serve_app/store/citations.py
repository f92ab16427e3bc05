"""Where a knowledge-base chunk came from: its document's id, title, chunk and headings.

Search rows carry the memory columns only (``records.MEMORY_COLUMNS``: what the hot
cache holds and every memory response shows); a chunk's provenance lives in its
``data`` (the knowledge base's contract: ``document_id``, ``version``, ``chunk_index``,
``char_start``, ``char_end``, ``heading_path``, ``title``, ``source_url``). It is read
here, one indexed statement per search, only for the chunks a search returns, so a
search without chunks pays nothing and the cache stays as lean as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.store.documents import CHUNK_TYPE


class CitationStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def lookup(self, tenant_id: str, ids: Sequence[Any]) -> dict[Any, dict[str, Any]]:
        """id -> the chunk's ``data`` for those of ``ids`` that are chunks of the tenant."""
        if not ids:
            return {}
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, data FROM memory_items WHERE tenant_id = %(tenant_id)s"
                " AND id = ANY(%(ids)s) AND type = %(type)s",
                {"tenant_id": tenant_id, "ids": list(ids), "type": CHUNK_TYPE},
            )
            return {r["id"]: r["data"] or {} for r in await cur.fetchall()}
