"""``memory_history``: the audit trail of every memory (ADD, UPDATE, DELETE, MERGE).

Writes are CTE fragments so each memory write records its events in the same
statement; a deleted memory's earlier events lose their content (right to be
forgotten) while the events themselves stay.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from serve_app.store.records import column_list

HISTORY_COLUMNS: tuple[str, ...] = (
    "id",
    "memory_id",
    "event",
    "old_content",
    "new_content",
    "actor",
    "created_at",
    "new_data",  # why (reconcile: decision, reason, source turns, supersedes/superseded_by)
)


def record_cte(name: str, source: sql.Composable) -> sql.Composed:
    """CTE ``name``: one event per row of ``source``, in its order.

    ``source`` yields ``memory_id, user_id, event, old_content, new_content``;
    the statement binds ``%(tenant_id)s`` and ``%(actor)s``.
    """
    return sql.SQL(
        "{name} AS (INSERT INTO memory_history"
        " (memory_id, tenant_id, user_id, event, old_content, new_content, actor)"
        " SELECT e.memory_id, %(tenant_id)s, e.user_id, e.event, e.old_content, e.new_content,"
        " %(actor)s FROM ({source}) e)"
    ).format(name=sql.Identifier(name), source=source)


def forget_cte(name: str, ids: sql.Composable) -> sql.Composed:
    """CTE ``name``: blank the content of every event of the memories ``ids`` yields."""
    return sql.SQL(
        "{name} AS (UPDATE memory_history SET old_content = NULL, new_content = NULL,"
        " old_data = NULL, new_data = NULL"
        " WHERE tenant_id = %(tenant_id)s AND memory_id IN ({ids}))"
    ).format(name=sql.Identifier(name), ids=ids)


async def annotate(
    conn: AsyncConnection, tenant_id: str, memory_id: uuid.UUID, data: dict[str, Any]
) -> None:
    """Merge ``data`` into ``new_data`` of the memory's latest event: why a write was
    made (extraction's reconcile decision, the model's reason, the source turns).
    Call it in the write's own transaction, right after the write."""
    await conn.execute(
        "UPDATE memory_history SET new_data = coalesce(new_data, '{}'::jsonb) || %(data)s"
        " WHERE id = (SELECT max(id) FROM memory_history"
        " WHERE tenant_id = %(tenant_id)s AND memory_id = %(memory_id)s)",
        {"tenant_id": tenant_id, "memory_id": memory_id, "data": Jsonb(data)},
    )


async def events(
    conn: AsyncConnection, tenant_id: str, memory_id: uuid.UUID, limit: int
) -> list[dict[str, Any]]:
    """The memory's newest ``limit`` events, oldest first: a memory updated without end
    has a history without end, read back whole on every call."""
    cur = await conn.execute(
        sql.SQL(
            "SELECT * FROM (SELECT {cols} FROM memory_history"
            " WHERE tenant_id = %(tenant_id)s AND memory_id = %(memory_id)s"
            " ORDER BY id DESC LIMIT %(limit)s) newest ORDER BY id"
        ).format(cols=column_list(HISTORY_COLUMNS)),
        {"tenant_id": tenant_id, "memory_id": memory_id, "limit": limit},
    )
    return await cur.fetchall()
