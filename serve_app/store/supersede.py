"""``supersedes: [ids]`` on an add: the new memory retires the owner's older ones.

Retiring never deletes: a retired memory gets ``valid_until`` (the new memory's
``valid_from``, else now; never before its own ``valid_from``) and ``superseded_by``
(the new id), an INVALIDATE history event, and its owner's version moves on (caches
drop it). It happens in the add's own statement: the targets are locked first
(``FOR UPDATE``) and the add writes nothing unless every one of them is the owner's,
live and still valid, so a refused add leaves no trace. :func:`refusal` then says why
(unknown or another owner's: 404; already retired: 409).

These are CTE fragments for :func:`serve_app.store.memory_writes.add_statement`; the
reconcile step of extraction can retire rows the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, sql

from serve_app.store import history
from serve_app.store.records import NewMemory, Owner, live, valid


class SupersedeRefused(Exception):
    """An add named a memory it may not retire; nothing was written."""

    def __init__(self, status: int, message: str, ids: Sequence[uuid.UUID]) -> None:
        super().__init__(message)
        self.status, self.ids = status, list(ids)


_OWNED = (
    "tenant_id = %(tenant_id)s AND user_id IS NOT DISTINCT FROM %(sup_user)s"
    " AND id = ANY(%(sup_ids)s::uuid[]) AND " + live()
)

# First CTE of the statement: the targets, locked; the gate counts them.
TARGETS = sql.SQL(
    "targets AS MATERIALIZED (SELECT id FROM memory_items WHERE "
    + _OWNED
    + " AND "
    + valid()
    + " FOR UPDATE),"
)
GATE = sql.SQL("(SELECT count(*) FROM targets) = cardinality(%(sup_ids)s::uuid[])")

# After the insert: retire each target for the new row (of CTE ``src``) naming it.
RETIRE = sql.SQL(
    "retired AS (UPDATE memory_items m SET"
    " valid_until = greatest(coalesce(p.valid_from, now()), m.valid_from),"
    " superseded_by = p.new_id, updated_at = now(), version = m.version + 1"
    " FROM (SELECT s.id AS new_id, s.valid_from, t.old_id::uuid AS old_id FROM src s"
    " CROSS JOIN LATERAL jsonb_array_elements_text(s.supersedes) AS t(old_id)) p"
    " WHERE m.tenant_id = %(tenant_id)s AND m.id = p.old_id AND m.id IN (SELECT id FROM targets)"
    " RETURNING m.id, m.user_id, m.owner, m.content),"
    " {history},"
).format(
    history=history.record_cte(
        "hist_retired",
        sql.SQL(
            "SELECT id AS memory_id, user_id, 'INVALIDATE'::text AS event,"
            " content AS old_content, NULL::text AS new_content FROM retired"
        ),
    )
)
RETIRED_OWNERS = sql.SQL("SELECT owner FROM retired")


def targets(items: Sequence[NewMemory]) -> list[uuid.UUID]:
    """Every id the items supersede; an id named twice is the caller's error."""
    ids = [uuid.UUID(str(i)) for item in items for i in item.supersedes]
    if len(set(ids)) != len(ids):
        raise SupersedeRefused(422, "a memory can be superseded only once per request", ids)
    return ids


def params(owner: Owner, ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    return {"sup_user": owner.user_id, "sup_ids": list(ids)}


async def refusal(
    conn: AsyncConnection, owner: Owner, ids: Sequence[uuid.UUID]
) -> SupersedeRefused | None:
    """Why an add superseding ``ids`` wrote nothing, if the targets are the reason."""
    cur = await conn.execute(
        "SELECT id, " + valid() + " AS ok FROM memory_items WHERE " + _OWNED,
        {"tenant_id": owner.tenant_id, **params(owner, ids)},
    )
    found = {r["id"]: r["ok"] for r in await cur.fetchall()}
    missing = [i for i in ids if i not in found]
    if missing:
        return SupersedeRefused(404, f"memory {missing[0]} not found", missing)
    retired = [i for i in ids if not found[i]]
    if retired:
        return SupersedeRefused(409, f"memory {retired[0]} is already invalidated", retired)
    return None
