"""Reading a user's profile memories: one indexed query per context block.

Membership is a property of the memory row (``profile_class``/``pinned``, migration
0018), so a forget, a supersede, an archive or an expiry takes the memory out of every
replica's next block at once: nothing is cached in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.store.records import MEMORY_COLUMNS, column_list, live, valid

# The partial index memory_items_profile_idx covers exactly this predicate.
MEMBER = (
    "i.status = 'active' AND (i.pinned OR (i.profile_class IS NOT NULL AND i.pinned IS NOT FALSE))"
)
_ORDER = (
    " ORDER BY i.pinned IS TRUE DESC,"
    " CASE i.profile_class WHEN 'instruction' THEN 0 WHEN 'constraint' THEN 1"
    " WHEN 'identity' THEN 2 ELSE 3 END, i.importance DESC, i.created_at DESC, i.id"
)


class ProfileStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self._sql = sql.SQL(
            "SELECT {cols}, i.profile_class, i.pinned FROM memory_items i"
            " WHERE i.tenant_id = %(tenant_id)s AND i.owner = ANY(%(owners)s) AND "
            + MEMBER
            + " AND "
            + live("i.")
            + " AND "
            + valid("i.")
            + " AND (i.scope <> 'session' OR i.session_id = %(session_id)s)"
            + " AND i.type <> 'document_chunk'"  # knowledge, never the profile
            + _ORDER
            + " LIMIT %(limit)s"
        ).format(cols=column_list(MEMORY_COLUMNS, "i"))

    async def members(
        self,
        tenant_id: str,
        owners: Sequence[str],
        limit: int,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The owners' profile memories, most important first (pinned, then by class)."""
        params = {
            "tenant_id": tenant_id,
            "owners": list(owners),
            "limit": limit,
            "session_id": session_id,
        }
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._sql, params)
            return await cur.fetchall()


def unclassified_statement(vectors: sql.Identifier) -> sql.Composed:
    """One page of a user's memories that have no profile class and no pin, with their
    stored vectors, after a cursor (``id``): what the profile rule can classify again
    (binds ``tenant_id``, ``owner``, ``after``, ``limit``). Knowledge chunks and
    retired rows are never profile material; a pin (true or false) is the user's word."""
    return sql.SQL(
        "SELECT i.id, i.content, i.type, v.embedding FROM memory_items i"
        " JOIN {vectors} v ON v.item_id = i.id"
        " WHERE i.tenant_id = %(tenant_id)s AND i.owner = %(owner)s AND i.id > %(after)s"
        " AND i.profile_class IS NULL AND i.pinned IS NULL AND i.status = 'active'"
        " AND i.type <> 'document_chunk' AND {live}"
        " ORDER BY i.id LIMIT %(limit)s"
    ).format(vectors=vectors, live=sql.SQL(live("i.")))
