"""A batch add in chunks: chunk k+1 is embedded while chunk k is inserted.

Embedding a whole 100-item batch and then inserting it in one statement leaves the
database idle while the encoder runs, then the encoder idle while the database inserts.
Here the batch goes in chunks on one connection in ONE transaction, so it stays all or
nothing: a failed embed, a refused chunk (quota, a supersede target, a forget of the
owner) or a cancelled request rolls the earlier chunks back. Every chunk is an
:meth:`GuardedWriter.add` (the one write path). Its quota gate adds the earlier chunks'
items to the stored counts: the transaction defers counting (``quota.defer_counts``,
migration 0015) and counts all its rows once before the commit, so the tenant's count
row, which every write of the tenant updates, is not locked while later chunks embed.
The erasure guard is checked once more over the whole batch before the commit, so a
forget of any of its owners that began after chunk 1 voids the batch as it would the
single statement. After a refusal the whole batch is diagnosed again
(:meth:`GuardedWriter.refusal`), so the caller gets the error the single statement gives.

Cost: the owner's version row (bumped by each chunk) stays locked until the commit, so
another write of the same owner waits for the rest of this batch; and a batch holds a
pooled connection while later chunks embed, so at most ``max_open`` batches are
pipelined at once per replica (the composition root: half the pool) and the others
take the single statement, leaving connections to searches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from serve_app.store import NewMemory, Owner, erasure, quota
from serve_app.store.guarded import ForgetInProgress, GuardedWriter
from serve_app.store.quota import QuotaExceeded
from serve_app.store.supersede import SupersedeRefused

if TYPE_CHECKING:
    from serve_app.metrics import IngestMetrics
    from serve_app.services.backends import Embed

_REFUSALS = (SupersedeRefused, ForgetInProgress, QuotaExceeded)


class _Voided(Exception):
    """Inside extraction work a forget voided a chunk: roll back and write nothing."""


class IngestPipeline:
    """Adds a batch longer than ``chunk`` items in pipelined chunks (see the module)."""

    def __init__(
        self,
        writer: GuardedWriter,
        embed: Embed,
        chunk: int,
        *,
        max_open: int = 1,
        metrics: IngestMetrics | None = None,
    ) -> None:
        self.writer = writer
        self.embed = embed
        self.chunk = chunk  # items per chunk; 0: off
        self.max_open = max_open  # batches pipelined at once (each holds a connection)
        self.open = 0
        self.metrics = metrics

    def applies(self, n: int) -> bool:
        """Whether a batch of ``n`` items is pipelined (more than one chunk, a free slot);
        :meth:`add` must follow with no await in between (it takes the slot)."""
        if not 0 < self.chunk < n:
            return False
        free = self.open < self.max_open
        if self.metrics is not None:
            self.metrics.batch(free, self.open)
        return free

    async def add(
        self, owner: Owner, items: Sequence[NewMemory], *, actor: str | None
    ) -> list[dict[str, Any]]:
        """Rows in input order, as :meth:`GuardedWriter.add` returns them for the batch."""
        self.open += 1
        try:
            prepared = await self.writer.prepared(owner, items)  # errors name batch items
            return await self._all_or_nothing(owner, prepared, actor)
        finally:
            self.open -= 1

    async def _all_or_nothing(
        self, owner: Owner, items: Sequence[NewMemory], actor: str | None
    ) -> list[dict[str, Any]]:
        parts = [items[i : i + self.chunk] for i in range(0, len(items), self.chunk)]
        try:
            return await self._write(owner, items, parts, actor)
        except _Voided:
            return []
        except _REFUSALS as exc:
            why = await self.writer.refusal(owner, items)
            raise (why or exc) from None

    async def _write(
        self,
        owner: Owner,
        items: Sequence[NewMemory],
        parts: list[Sequence[NewMemory]],
        actor: str | None,
    ) -> list[dict[str, Any]]:
        vectors = await self._embed(parts[0])  # before the connection is taken
        rows: list[dict[str, Any]] = []
        async with self.writer.pool.connection() as conn, conn.transaction():
            await quota.defer_counts(conn)  # the tenant's count row: locked at the end only
            for k, part in enumerate(parts):
                ahead = (
                    asyncio.ensure_future(self._embed(parts[k + 1])) if k + 1 < len(parts) else None
                )
                try:
                    added = await self.writer.add(
                        owner, part, vectors, actor=actor, conn=conn, earlier=items[: len(rows)]
                    )
                    if ahead is not None:
                        vectors = await ahead
                finally:
                    if ahead is not None:  # no-op once awaited; else cancelled
                        _drop(ahead)
                if len(added) < len(part):
                    raise _Voided
                rows.extend(added)
            if not await self.writer.guard_passes(conn, owner, items):
                if erasure.current() is not None:
                    raise _Voided
                raise ForgetInProgress(owner)
            per_tenant = (await self.writer.quotas(owner.tenant_id))[0].per_tenant
            await quota.count_added(conn, owner.tenant_id, [r["id"] for r in rows], per_tenant)
        return rows

    async def _embed(self, part: Sequence[NewMemory]) -> np.ndarray:
        return await self.embed([i.content for i in part], is_query=False)


def _drop(task: asyncio.Future[Any]) -> None:
    """Cancel an embed no longer wanted; its error (if any) is retrieved, not logged."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
