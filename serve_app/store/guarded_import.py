"""A whole import in one transaction, on the :class:`GuardedWriter`'s checks.

:func:`import_batch` writes through the :class:`GuardedWriter` it is given: memories
(with their timestamps, status, validity and history) and facts (every version) are
validated up front, then written through the writer's own ``add`` and ``upsert_fact``
(so quotas and the erasure guard hold as for any producer) together with the
restamping and history replay of :mod:`serve_app.store.imports`; any refusal rolls all
of it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from serve_app.store import events, imports
from serve_app.store.guarded import ForgetInProgress, GuardedWriter
from serve_app.store.records import Owner
from serve_app.store.validation import ValidationError, check_fact, check_memory, when
from serve_app.store.validation import field as check_field


async def import_batch(
    writer: GuardedWriter,
    owner: Owner,
    memories: Sequence[imports.ImportedMemory],
    vectors: np.ndarray,
    history_rows: Sequence[imports.ImportedEvent],
    facts: Sequence[imports.ImportedFact],
    *,
    actor: str | None,
) -> dict[str, Any]:
    """Memories (with their timestamps, status, validity and history) and facts (every
    version) in one transaction: any refusal (validation, quota, a running forget)
    raises and rolls all of it back."""
    for n, m in enumerate(memories):
        try:
            check_memory(m.item, writer.max_chars)
            for name in ("status", "valid_from", "valid_until"):
                check_field(name, getattr(m, name), writer.max_chars)
            when("created_at", m.created_at)
            when("updated_at", m.updated_at)
        except ValidationError as exc:
            raise ValidationError(f"memory {n}: {exc}") from None
    for f in facts:
        check_fact(f.category, f.key, f.value, f.confidence, f.importance, writer.max_chars)
    outcomes: dict[str, int] = {}
    async with writer.pool.connection() as conn, conn.transaction():
        rows = []
        if memories:
            items = [m.item for m in memories]
            rows = await writer.add(owner, items, vectors, actor=actor, conn=conn)
        ids = [r["id"] for r in rows]
        new_ids = {m.source_id: i for m, i in zip(memories, ids, strict=True) if m.source_id}
        await imports.restamp_memories(conn, owner.tenant_id, ids, list(memories), new_ids)
        await conn.execute(events.QUIET)  # replayed history is the source's past
        history = await imports.replay_history(conn, owner, new_ids, list(history_rows))
        await conn.execute(events.LOUD)
        fact_ids: dict[str, uuid.UUID] = {}
        for f in (f for f in facts if f.active):
            outcome = await writer.upsert_fact(
                owner,
                f.category,
                f.key,
                f.value,
                f.confidence,
                session_id=f.session_id,
                source=f.source,
                importance=f.importance,
                conn=conn,
            )
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            fact_id = await imports.active_fact_id(conn, owner, f.category, f.key)
            if outcome == "added" and fact_id is not None:
                await imports.restamp_fact(conn, fact_id, f)
            if f.source_id and fact_id is not None:
                fact_ids[f.source_id] = fact_id
        inactive = [f for f in facts if not f.active]
        versions = await imports.insert_fact_versions(conn, owner, inactive, fact_ids)
        # Re-checked (forgets since the transaction began) as the ingest pipeline does:
        if not await writer.guard_passes(conn, owner, [*(m.item for m in memories), *facts]):
            raise ForgetInProgress(owner)
        imported = {
            "memories": len(ids),
            "facts": sum(outcomes.values()),
            "fact_versions": versions,
            "history": history,
        }
        await events.emit(
            conn, owner.tenant_id, "import.completed", user_id=owner.user_id, data=imported
        )
    return {
        "imported": imported,
        "facts": outcomes,
        "memory_ids": [str(i) for i in ids],
    }
