"""What an import carries over beyond a plain add: timestamps, status, validity, history
and every version of each fact, attributed to the new ids.

Called only by :func:`serve_app.store.guarded_import.import_batch`, inside its
one transaction, after the memories were added through the guarded path (erasure
guard, quota, validation): these statements only restamp rows that transaction just
inserted and add history rows and inactive fact versions next to them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from serve_app.store.records import NewMemory, Owner


@dataclass
class ImportedMemory:
    """A memory to import: the add's item and what its source row keeps."""

    item: NewMemory
    source_id: str | None = None  # its id at the source (history points at it)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    status: str = "active"
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    superseded_by: str | None = None  # source ids of the supersession chain
    supersedes: list[str] = field(default_factory=list)


@dataclass
class ImportedEvent:
    """One history event of an imported memory (``memory_id``: the source's id)."""

    memory_id: str
    event: str
    old_content: str | None = None
    new_content: str | None = None
    actor: str | None = None
    created_at: datetime | None = None
    new_data: dict[str, Any] | None = None  # why (reconcile: decision, reason, turns)


@dataclass
class ImportedFact:
    """One version of a fact; the active one goes through the writer's upsert."""

    category: str
    key: str
    value: str
    confidence: float = 0.9
    importance: float = 0.5
    active: bool = True
    source: str = "import"
    session_id: str | None = None
    source_id: str | None = None
    superseded_by: str | None = None  # the source's id of the version that replaced it
    created_at: datetime | None = None
    updated_at: datetime | None = None
    superseded_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


async def restamp_memories(
    conn: AsyncConnection,
    tenant_id: str,
    ids: list[uuid.UUID],
    records: list[ImportedMemory],
    new_ids: dict[str, uuid.UUID],
) -> None:
    """The source's timestamps, status, validity and supersession chain (mapped to the
    new ids; links to memories not imported are dropped) on the rows just added."""
    await conn.execute(
        "UPDATE memory_items i SET created_at = coalesce(s.created_at, i.created_at),"
        " updated_at = coalesce(s.updated_at, s.created_at, i.updated_at), status = s.status,"
        " valid_from = s.valid_from, valid_until = s.valid_until, superseded_by = s.by,"
        " supersedes = ARRAY(SELECT jsonb_array_elements_text(s.sup))::uuid[]"
        " FROM unnest(%(ids)s::uuid[], %(created)s::timestamptz[], %(updated)s::timestamptz[],"
        " %(status)s::text[], %(vfrom)s::timestamptz[], %(vuntil)s::timestamptz[],"
        " %(by)s::uuid[], %(sup)s::jsonb[])"
        " AS s(id, created_at, updated_at, status, valid_from, valid_until, by, sup)"
        " WHERE i.id = s.id AND i.tenant_id = %(tenant_id)s",
        {
            "by": [new_ids.get(r.superseded_by or "") for r in records],
            "sup": [
                Jsonb([str(new_ids[x]) for x in r.supersedes if x in new_ids]) for r in records
            ],
            "tenant_id": tenant_id,
            "ids": ids,
            "created": [r.created_at for r in records],
            "updated": [r.updated_at for r in records],
            "status": [r.status for r in records],
            "vfrom": [r.valid_from for r in records],
            "vuntil": [r.valid_until for r in records],
        },
    )


async def replay_history(
    conn: AsyncConnection,
    owner: Owner,
    new_ids: dict[str, uuid.UUID],
    events: list[ImportedEvent],
) -> int:
    """The source's events of each imported memory in place of the add's own ADD event
    (a memory whose source sent no events keeps that ADD). Events of memories not
    imported (deleted at the source) are dropped. Returns how many were written."""
    kept = [e for e in events if e.memory_id in new_ids]
    if not kept:
        return 0
    targets = sorted({new_ids[e.memory_id] for e in kept})
    await conn.execute(
        "DELETE FROM memory_history WHERE tenant_id = %(t)s AND memory_id = ANY(%(ids)s)",
        {"t": owner.tenant_id, "ids": targets},
    )
    await conn.execute(
        "INSERT INTO memory_history (memory_id, tenant_id, user_id, event, old_content,"
        " new_content, actor, created_at, new_data)"
        " SELECT e.memory_id, %(t)s, %(u)s, e.event, e.old_content, e.new_content, e.actor,"
        " coalesce(e.created_at, now()), e.new_data"
        " FROM unnest(%(mid)s::uuid[], %(ev)s::text[], %(old)s::text[], %(new)s::text[],"
        " %(actor)s::text[], %(at)s::timestamptz[], %(data)s::jsonb[]) WITH ORDINALITY"
        " AS e(memory_id, event, old_content, new_content, actor, created_at, new_data, ord)"
        " ORDER BY e.ord",
        {
            "t": owner.tenant_id,
            "u": owner.user_id,
            "mid": [new_ids[e.memory_id] for e in kept],
            "ev": [e.event for e in kept],
            "old": [e.old_content for e in kept],
            "new": [e.new_content for e in kept],
            "actor": [e.actor for e in kept],
            "at": [e.created_at for e in kept],
            "data": [None if e.new_data is None else Jsonb(e.new_data) for e in kept],
        },
    )
    return len(kept)


async def active_fact_id(
    conn: AsyncConnection, owner: Owner, category: str, key: str
) -> uuid.UUID | None:
    cur = await conn.execute(
        "SELECT id FROM facts WHERE tenant_id = %(t)s AND user_id = %(u)s"
        " AND category = %(c)s AND key = %(k)s AND active",
        {"t": owner.tenant_id, "u": owner.user_id, "c": category, "k": key},
    )
    row = await cur.fetchone()
    return None if row is None else row["id"]


async def restamp_fact(conn: AsyncConnection, fact_id: uuid.UUID, f: ImportedFact) -> None:
    """The source's timestamps and validity on an active fact the import added."""
    await conn.execute(
        "UPDATE facts SET created_at = coalesce(%(c)s, created_at),"
        " updated_at = coalesce(%(u)s, %(c)s, updated_at), valid_from = %(vf)s"
        " WHERE id = %(id)s",
        {"id": fact_id, "c": f.created_at, "u": f.updated_at, "vf": f.valid_from},
    )


async def insert_fact_versions(
    conn: AsyncConnection, owner: Owner, versions: list[ImportedFact], ids: dict[str, uuid.UUID]
) -> int:
    """Replaced versions as inactive rows (the fact's history), their ``superseded_by``
    pointing at the new ids (``ids``: source id -> new id, filled in here too)."""
    for v in versions:
        if v.source_id:
            ids.setdefault(v.source_id, uuid.uuid4())
    for v in versions:
        await conn.execute(
            "INSERT INTO facts (id, tenant_id, user_id, category, key, value, confidence,"
            " importance, active, source, session_id, created_at, updated_at, superseded_at,"
            " superseded_by, valid_from, valid_until) VALUES (%(id)s, %(t)s, %(u)s, %(c)s,"
            " %(k)s, %(v)s, %(conf)s, %(imp)s, false, %(src)s, %(s)s, coalesce(%(ca)s, now()),"
            " coalesce(%(ua)s, %(ca)s, now()), coalesce(%(sa)s, now()), %(by)s, %(vf)s,"
            " coalesce(%(vu)s, %(sa)s, now()))",
            {
                "id": ids[v.source_id] if v.source_id else uuid.uuid4(),
                "t": owner.tenant_id,
                "u": owner.user_id,
                "c": v.category,
                "k": v.key,
                "v": v.value,
                "conf": v.confidence,
                "imp": v.importance,
                "src": v.source,
                "s": v.session_id,
                "ca": v.created_at,
                "ua": v.updated_at,
                "sa": v.superseded_at,
                "by": ids.get(v.superseded_by) if v.superseded_by else None,
                "vf": v.valid_from,
                "vu": v.valid_until,
            },
        )
    return len(versions)
