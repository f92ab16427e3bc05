"""Applying the model's reconcile decisions (UPDATE, INVALIDATE, NOOP) to known rows.

Runs inside the batch's owner-locked transaction (:func:`writer.owner_lock`), so a
batch's decisions commit or fail together. The model decided from what it was shown;
a row edited or retired since then is never overwritten blindly: each target is
re-read under a row lock and must still be live at the version the prompt showed.
Otherwise an UPDATE's new content is added as a plain new memory (it goes through
the hash/similarity pre-filter like any ADD) and an INVALIDATE is dropped: the
caller's edit wins, and the outcome is counted (``conflict``/``gone``).

UPDATE retires the old row and adds the new one linked to it (``supersedes``; the
old row gets ``valid_until`` and ``superseded_by``) rather than editing in place:
``as_of`` a time before the change must still return the old value. INVALIDATE
sets ``valid_until`` and never deletes. Each applied decision annotates its history
events with the decision, the model's reason and the source turn indexes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from serve_app.extraction.parser import ExtractedMemory
from serve_app.extraction.reconcile import Known, Shown
from serve_app.metrics import ExtractionMetrics
from serve_app.store import history
from serve_app.store.guarded import GuardedWriter
from serve_app.store.memory_index import VersionConflict
from serve_app.store.records import NewMemory, Owner, live, valid
from serve_app.text import dedupe_hash

ACTOR = "extractor"


@dataclass(frozen=True)
class Provenance:
    """Where a decision came from: the batch's turn indexes and the turns' time."""

    turns: list[int]
    at: datetime | None = None  # when the newest source turn was said (event time)

    def note(self, m: ExtractedMemory, **extra: Any) -> dict[str, Any]:
        """The history annotation of one decision (cited turns must be the batch's)."""
        cited = [t for t in m.turns if t in self.turns] or self.turns
        return {"decision": m.event, "reason": m.reason, "turns": cited, **extra}


async def locked_current(conn: AsyncConnection, owner: Owner, item_id: uuid.UUID) -> dict | None:
    """The owner's row if it is still live and valid now, locked for this transaction."""
    cur = await conn.execute(
        "SELECT id, version, content FROM memory_items WHERE id = %(id)s"
        " AND tenant_id = %(tenant_id)s AND user_id = %(user_id)s AND status = 'active'"
        " AND " + live() + " AND " + valid() + " FOR UPDATE",
        {"id": item_id, "tenant_id": owner.tenant_id, "user_id": owner.user_id},
    )
    return await cur.fetchone()


async def stale(conn: AsyncConnection, owner: Owner, target: Shown) -> str | None:
    """Why ``target`` may not be acted on now ("gone", "conflict"), or None."""
    row = await locked_current(conn, owner, target.id)
    if row is None:
        return "gone"
    if row["version"] != target.version:
        return "conflict"
    return None


async def supersede(
    conn: AsyncConnection,
    writes: GuardedWriter,
    owner: Owner,
    target: Shown,
    item: NewMemory,
    vector: np.ndarray,
    prov: Provenance,
    m: ExtractedMemory,
) -> dict[str, Any] | None:
    """UPDATE: add ``item`` retiring ``target`` (checked fresh by :func:`stale`); the
    new row, or None when the write was voided (a forget of the owner)."""
    item.supersedes = [target.id]
    item.valid_from = item.valid_from or prov.at  # the old one's valid_until
    rows = await writes.add(owner, [item], vector[None, :], actor=ACTOR, conn=conn)
    if not rows:
        return None
    new = rows[0]
    note = prov.note(m, alias=target.alias)
    await history.annotate(conn, owner.tenant_id, new["id"], {**note, "supersedes": str(target.id)})
    await history.annotate(
        conn, owner.tenant_id, target.id, {**note, "superseded_by": str(new["id"])}
    )
    return new


async def invalidate(
    conn: AsyncConnection,
    writes: GuardedWriter,
    owner: Owner,
    target: Shown,
    prov: Provenance,
    m: ExtractedMemory,
) -> str:
    """INVALIDATE: retire ``target`` at the source turns' time; the outcome."""
    try:
        row = await writes.update(
            owner,
            target.id,
            {"valid_until": prov.at or datetime.now(UTC)},
            None,
            actor=ACTOR,
            event="INVALIDATE",
            expected_version=target.version,
            conn=conn,
        )
    except VersionConflict:
        return "conflict"
    if row is None:
        return "gone"
    await history.annotate(conn, owner.tenant_id, target.id, prov.note(m, alias=target.alias))
    return "invalidated"


def event(kind: str, memory_id: Any, memory: str, **extra: Any) -> dict[str, Any]:
    """One entry of mem0's event list (ADD, UPDATE, DELETE, NONE)."""
    return {"id": str(memory_id), "memory": memory, "event": kind, **extra}


async def apply(
    conn: AsyncConnection,
    writes: GuardedWriter,
    owner: Owner,
    m: ExtractedMemory,
    item: NewMemory | None,
    vector: np.ndarray | None,
    known: Known,
    prov: Provenance,
    metrics: ExtractionMetrics,
) -> dict[str, Any] | None:
    """Apply an UPDATE, INVALIDATE or NOOP; its mem0 event, ``{}`` when nothing is
    reported, or None when the memory is to be handled as an ADD after all (an UPDATE
    whose target is unknown, stale or a fact)."""
    target, why = known.resolve(m.target)
    if target is None:
        metrics.rejected(why or "unknown")
        return None if m.event == "UPDATE" else {}
    if m.event == "NOOP":
        metrics.decision("noop")
        return event("NONE", target.id, target.content)
    if target.kind != "memory":  # facts change by key (the answer's "facts" list)
        metrics.decision("fact_target")
        return None if m.event == "UPDATE" else {}
    if m.event == "INVALIDATE":
        outcome = await invalidate(conn, writes, owner, target, prov, m)
        metrics.decision(outcome)
        return event("DELETE", target.id, target.content) if outcome == "invalidated" else {}
    assert item is not None and vector is not None  # UPDATE carries content
    if dedupe_hash(item.content) == dedupe_hash(target.content):
        metrics.decision("noop")
        return event("NONE", target.id, target.content)
    why = await stale(conn, owner, target)
    if why is not None:  # edited or retired since the prompt: never overwrite it blindly
        metrics.decision(why)
        return None
    new = await supersede(conn, writes, owner, target, item, vector, prov, m)
    if new is None:
        metrics.decision("erased")
        return {}
    metrics.decision("updated")
    return event(
        "UPDATE",
        new["id"],
        new["content"],
        previous_memory=target.content,
        previous_id=str(target.id),
    )
