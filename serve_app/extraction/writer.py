"""Writes extraction results: dedup, merge or insert, under a per-owner lock.

Two jobs of one user (two identical ``infer`` items, two replicas) must not both
see "no duplicate" and both insert. Every dedup-and-write runs in one transaction
that first takes ``pg_advisory_xact_lock`` on the owner, so they run one after the
other across all replicas; the lock goes with the transaction (a crash or a
rollback cannot leak it). A merge applies only to the row version dedup read, so a
concurrent PATCH is never overwritten (the merge re-reads and tries once more).
Every write goes through the :class:`GuardedWriter` (erasure guard, quota,
validation): an item it refuses is skipped and counted (``over_quota``, ``invalid``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import numpy as np
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from serve_app.extraction import decisions
from serve_app.extraction.decisions import Provenance
from serve_app.extraction.parser import ExtractedMemory
from serve_app.extraction.reconcile import Known
from serve_app.metrics import ExtractionMetrics
from serve_app.store import NewMemory, Owner, history
from serve_app.store.guarded import GuardedWriter
from serve_app.store.memory_index import Match, MemoryIndex, VersionConflict
from serve_app.store.quota import QuotaExceeded
from serve_app.text import dedupe_hash

log = logging.getLogger(__name__)
ACTOR = decisions.ACTOR
MAX_ALIASES = 20  # earlier wordings of a merged memory kept for exact-hash dedup


class Counts(Protocol):
    saved: int
    merged: int
    skipped: int
    events: list[dict[str, Any]]


@asynccontextmanager
async def owner_lock(pool: AsyncConnectionPool, owner: Owner) -> AsyncIterator[AsyncConnection]:
    """A transaction holding the owner's write lock (released at commit/rollback)."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"memserve:owner:{owner.tenant_id}/{owner.user_id}",),
        )
        yield conn


class MemoryWriter:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        store: GuardedWriter,
        index: MemoryIndex,
        merge_similarity: float,
        metrics: ExtractionMetrics,
    ) -> None:
        self.pool = pool
        self.store = store
        self.index = index
        self.merge_similarity = merge_similarity
        self.metrics = metrics

    async def save(
        self,
        owner: Owner,
        memories: Sequence[ExtractedMemory],
        vectors: Sequence[np.ndarray | None],
        template: NewMemory,
        out: Counts,
        known: Known | None = None,
        prov: Provenance | None = None,
    ) -> None:
        """Each memory, in one transaction: a reconcile decision on a row the prompt
        showed (:mod:`decisions`), else skip (same text), merge (similar), or insert
        with ``template``'s scope, session, tags and metadata. ``vectors``: None for
        items without content (INVALIDATE, NOOP)."""
        prov = prov or Provenance([])
        async with owner_lock(self.pool, owner) as conn:
            for m, vector in zip(memories, vectors, strict=True):
                item = self._item(m, template) if m.content else None
                if item is not None and self.store.invalid(item) is not None:
                    self._count(out, "skipped", "invalid")
                    continue
                if m.event != "ADD" and known is not None:
                    done = await decisions.apply(
                        conn, self.store, owner, m, item, vector, known, prov, self.metrics
                    )
                    if done is not None:
                        if done:
                            out.events.append(done)
                        continue
                if item is not None and vector is not None:  # an ADD (or an UPDATE gone ADD)
                    await self._add(conn, owner, m, item, vector, prov, out)

    @staticmethod
    def _item(m: ExtractedMemory, template: NewMemory) -> NewMemory:
        return NewMemory(
            content=m.content,
            type=m.type,
            scope=template.scope,
            agent_id=template.agent_id,
            session_id=template.session_id,
            tags=list(dict.fromkeys([*m.tags, *template.tags])),
            metadata=dict(template.metadata),
            importance=m.importance,
            confidence=m.confidence,
            source=template.source,
            valid_from=m.valid_from or template.valid_from,
            profile_class=m.profile_class,
        )

    async def _add(
        self,
        conn: AsyncConnection,
        owner: Owner,
        m: ExtractedMemory,
        item: NewMemory,
        vector: np.ndarray,
        prov: Provenance,
        out: Counts,
    ) -> None:
        """The cheap pre-filter (exact hash, then >= merge_similarity), else an insert."""
        same = await self.index.by_hash(owner, m.content, conn)
        if same is not None:
            self._count(out, "skipped")
            out.events.append(decisions.event("NONE", same, m.content))
            return
        merged = await self._merge(conn, owner, m, vector)
        if merged is not None:
            self._count(out, "merged")
            out.events.append(
                decisions.event("UPDATE", merged.id, m.content, previous_memory=merged.content)
            )
            if prov.turns:
                await history.annotate(conn, owner.tenant_id, merged.id, prov.note(m))
            return
        try:
            added = await self.store.add(owner, [item], vector[None, :], actor=ACTOR, conn=conn)
        except QuotaExceeded:
            self._count(out, "skipped", "over_quota")
            return
        self._count(out, "saved" if added else "skipped")  # none: voided by a forget
        if added:
            out.events.append(decisions.event("ADD", added[0]["id"], added[0]["content"]))
            if prov.turns:
                await history.annotate(conn, owner.tenant_id, added[0]["id"], prov.note(m))

    async def add_unique(
        self, owner: Owner, items: Sequence[NewMemory], vectors: np.ndarray
    ) -> list[NewMemory]:
        """Insert the items whose text the owner does not have yet; returns those."""
        async with owner_lock(self.pool, owner) as conn:
            fresh = [
                (item, vector)
                for item, vector in zip(items, vectors, strict=True)
                if self.store.invalid(item) is None
                and await self.index.by_hash(owner, item.content, conn) is None
            ]
            if not fresh:
                return []
            try:
                added = await self.store.add(
                    owner,
                    [i for i, _ in fresh],
                    np.stack([v for _, v in fresh]),
                    actor=ACTOR,
                    conn=conn,
                )
            except QuotaExceeded:
                self.metrics.memory("over_quota", len(fresh))
                return []
        return [i for i, _ in fresh] if added else []

    async def _merge(
        self, conn: AsyncConnection, owner: Owner, m: ExtractedMemory, vector: np.ndarray
    ) -> Match | None:
        """The memory ``m`` was merged into (as it was before), or None."""
        for _ in range(2):  # a concurrent PATCH moved the version on: re-read once
            [best] = await self.index.nearest(owner, vector, 1, conn=conn) or [None]
            if best is None or best.similarity < self.merge_similarity:
                return None
            # Recency wins the wording; earlier wordings stay recognisable as aliases.
            aliases = [*best.data.get("aliases", []), dedupe_hash(best.content)]
            changes: dict[str, Any] = {
                "content": m.content,
                "data": {**best.data, "aliases": list(dict.fromkeys(aliases))[-MAX_ALIASES:]},
                "importance": max(best.importance, m.importance),
                "confidence": max(best.confidence, m.confidence),
                "tags": list(dict.fromkeys([*best.tags, *m.tags])),
            }
            try:
                await self.store.update(
                    owner,
                    best.id,
                    changes,
                    vector,
                    actor=ACTOR,
                    event="MERGE",
                    expected_version=best.version,
                    conn=conn,
                )
                return best
            except VersionConflict:
                self.metrics.memory("merge_conflict")
        log.warning("merge into a memory of %s kept conflicting; stored as new", owner)
        return None

    def _count(self, out: Counts, outcome: str, metric: str | None = None) -> None:
        setattr(out, outcome, getattr(out, outcome) + 1)
        self.metrics.memory(metric or outcome)
