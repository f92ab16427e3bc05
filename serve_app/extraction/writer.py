"""Writes extraction results: dedup, merge or insert, under a per-owner lock.

Two jobs of one user (two identical ``infer`` items, two replicas) must not both
see "no duplicate" and both insert. Every dedup-and-write runs in one transaction
that first takes ``pg_advisory_xact_lock`` on the owner, so they run one after the
other across all replicas; the lock goes with the transaction (a crash or a
rollback cannot leak it). A merge applies only to the row version dedup read, so a
concurrent PATCH is never overwritten (the merge re-reads and tries once more).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import numpy as np
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from serve_app.extraction.parser import ExtractedMemory
from serve_app.metrics import ExtractionMetrics
from serve_app.store import MemoryStore, NewMemory, Owner
from serve_app.store.memory_index import MemoryIndex, VersionConflict
from serve_app.text import dedupe_hash

log = logging.getLogger(__name__)
ACTOR = "extractor"
MAX_ALIASES = 20  # earlier wordings of a merged memory kept for exact-hash dedup


class Counts(Protocol):
    saved: int
    merged: int
    skipped: int


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
        store: MemoryStore,
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
        vectors: np.ndarray,
        template: NewMemory,
        out: Counts,
    ) -> None:
        """Each memory: skip (same text), merge (similar), or insert with ``template``'s
        scope, session, tags and metadata."""
        async with owner_lock(self.pool, owner) as conn:
            for m, vector in zip(memories, vectors, strict=True):
                if await self.index.by_hash(owner, m.content, conn) is not None:
                    self._count(out, "skipped")
                    continue
                if await self._merge(conn, owner, m, vector):
                    self._count(out, "merged")
                    continue
                item = NewMemory(
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
                )
                await self.store.add(owner, [item], vector[None, :], actor=ACTOR, conn=conn)
                self._count(out, "saved")

    async def add_unique(
        self, owner: Owner, items: Sequence[NewMemory], vectors: np.ndarray
    ) -> list[NewMemory]:
        """Insert the items whose text the owner does not have yet; returns those."""
        async with owner_lock(self.pool, owner) as conn:
            fresh = [
                (item, vector)
                for item, vector in zip(items, vectors, strict=True)
                if await self.index.by_hash(owner, item.content, conn) is None
            ]
            if fresh:
                await self.store.add(
                    owner,
                    [i for i, _ in fresh],
                    np.stack([v for _, v in fresh]),
                    actor=ACTOR,
                    conn=conn,
                )
        return [i for i, _ in fresh]

    async def _merge(
        self, conn: AsyncConnection, owner: Owner, m: ExtractedMemory, vector: np.ndarray
    ) -> bool:
        for _ in range(2):  # a concurrent PATCH moved the version on: re-read once
            [best] = await self.index.nearest(owner, vector, 1, conn=conn) or [None]
            if best is None or best.similarity < self.merge_similarity:
                return False
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
                    owner, best.id, changes, vector, actor=ACTOR, event="MERGE",
                    expected_version=best.version, conn=conn,
                )  # fmt: skip
                return True
            except VersionConflict:
                self.metrics.memory("merge_conflict")
        log.warning("merge into a memory of %s kept conflicting; stored as new", owner)
        return False

    def _count(self, out: Counts, outcome: str) -> None:
        setattr(out, outcome, getattr(out, outcome) + 1)
        self.metrics.memory(outcome)
