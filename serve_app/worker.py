"""The worker replica's background roles, off every request path.

One object per Extractor replica, built by ``serve_app.composition.build_worker`` (which
opens and closes its resources in order) and driven by the thin Ray wrapper in
``deployments/extractor.py``. The roles:

- extraction of session turns (the :class:`SessionScheduler` over an
  :class:`ExtractionPipeline`), triggered by the Ingress and re-scanned from the durable
  queue every ``MEMSERVE_EXTRACT_SCAN_INTERVAL_S``, so triggers lost to an LLM outage or a
  restart are made up for;
- periodic consolidation (merge, insights, decay);
- the re-embed worker of a model change (one replica holds the cluster-wide lock);
- big documents accepted as jobs (202) by the Ingress, embedded and written here;
- LLM spend upkeep (intents a dead replica left open, old rows);
- webhook delivery of the event outbox (a thread of its own, at a lower CPU priority).

A model change: the replica embeds with the registry's active model (:class:`ModelView`)
and rebuilds what writes vectors over the new table when it switches (work in flight
finishes on the old one).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.closing import Closer, close_all
from serve_app.consolidation.job import Consolidator, run_due
from serve_app.embedding_model import ModelFacts
from serve_app.extraction.outcome import Outcome
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.extraction.scheduler import SessionScheduler
from serve_app.llm.client import LLMClient
from serve_app.metrics import ConsolidationMetrics, ExtractionMetrics
from serve_app.profile.classify import ProfileClassifier
from serve_app.reembed.view import ModelView
from serve_app.reembed.worker import Reembedder
from serve_app.services.document_jobs import DocumentJobWorker
from serve_app.services.documents import DocumentService, document_service
from serve_app.services.tenant_settings import TenantService
from serve_app.settings import Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store.guarded import GuardedWriter
from serve_app.store.turns import SessionKey
from serve_app.webhooks.worker import DispatcherThread

log = logging.getLogger(__name__)


class EmbedMany(Protocol):
    """The Embedder's call: texts, whether they are queries, the model's reference (None:
    the active one) and whether they go in its bulk lane (after interactive callers)."""

    async def __call__(
        self, texts: list[str], is_query: bool, ref: str | None, bulk: bool
    ) -> Any: ...


@dataclass
class Worker:
    """What an Extractor replica runs; every part is built and started by
    ``build_worker``, and :meth:`aclose` stops them newest first."""

    settings: Settings
    pool: AsyncConnectionPool
    embed_many: EmbedMany
    tenants: TenantService
    spend: SpendMeter
    llm: LLMClient | None
    models: ModelView
    metrics: ExtractionMetrics
    consolidation_metrics: ConsolidationMetrics
    webhooks: DispatcherThread
    reembed: Reembedder = field(init=False)
    pipeline: ExtractionPipeline = field(init=False)
    scheduler: SessionScheduler = field(init=False)
    consolidator: Consolidator = field(init=False)
    document_jobs: DocumentJobWorker = field(init=False)
    _closers: list[Closer] = field(default_factory=list, repr=False)

    # ---------- what reads and writes a model's table ----------

    def pipeline_for(self, model: ModelFacts) -> ExtractionPipeline:
        return ExtractionPipeline(
            self.pool,
            model.table_slug,
            self._embed_with(model),
            self.llm,
            self.settings,
            self.metrics,
            guidance=self.tenants.guidance,
            writer=self.writer_for(model),
        )

    def writer_for(self, model: ModelFacts) -> GuardedWriter:
        """The one write path, with each tenant's quotas and retention (its settings)."""
        return GuardedWriter.from_settings(
            self.pool,
            model.table_slug,
            self.settings,
            quotas=self.tenants.quotas,
            retention=self.tenants.retention,
            # profile classes of memories the model gave none (its table's model)
            classifier=ProfileClassifier.from_settings(
                self._embed_with(model), self.settings.context
            ),
        )

    def consolidator_for(self, model: ModelFacts) -> Consolidator:
        return Consolidator(
            self.pool,
            model.table_slug,
            self._embed_with(model),
            self.llm,
            self.settings.consolidate,
            self.consolidation_metrics,
            writer=self.writer_for(model),
        )

    def documents_for(self, model: ModelFacts) -> DocumentService:
        """The document service the job worker writes through (``model``'s table)."""
        writer = self.writer_for(model)
        return document_service(self.pool, writer, self._embed_with(model), self.settings, model)

    def switch(self, model: ModelFacts) -> None:
        """The active model changed: new work reads and writes its table (work in flight
        finishes on the old one; the re-embed worker's settle passes pick up what it
        writes)."""
        self.pipeline = self.scheduler.pipeline = self.pipeline_for(model)
        self.consolidator = self.consolidator_for(model)
        self.document_jobs.documents = self.documents_for(model)

    def _embed_with(self, model: ModelFacts) -> Callable[..., Awaitable[np.ndarray]]:
        return functools.partial(self.embed, model=model)  # its vectors go with its table

    async def embed(
        self, texts: Sequence[str], *, is_query: bool, model: ModelFacts, bulk: bool = False
    ) -> np.ndarray:
        """``bulk``: the Embedder's bulk lane (the document job worker's chunks)."""
        vectors = await self.embed_many(list(texts), is_query, model.ref or None, bulk)
        return np.asarray(vectors, dtype=np.float32)

    async def embed_documents(self, texts: list[str], model: str) -> np.ndarray:
        """The re-embed worker's call: documents of the model being filled (bulk lane: a
        re-embed never holds the encoder ahead of queries and memory writes)."""
        return np.asarray(await self.embed_many(texts, False, model, True))

    # ---------- what the deployment answers ----------

    def submit(self, key: SessionKey, force: bool = False) -> asyncio.Future[Outcome | None]:
        """Schedule extraction of the session's pending turns (or join the running one)."""
        return self.scheduler.submit(key, force)

    async def scan_now(self) -> int:
        """Re-scan the durable queue now and wait for the work (tests, operators)."""
        n = await self.scheduler.scan_once()
        await self.scheduler.drain()
        return n

    async def consolidate_due(self) -> None:
        c = self.settings.consolidate
        await run_due(self.consolidator, c.min_interval_s, c.users_per_tick)

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.pipeline.enabled,
            "llm_circuit": self.llm.breaker.state if self.llm else None,
            "in_flight": self.scheduler.in_flight,
            "running": self.scheduler.running,
            "dropped_triggers": self.scheduler.dropped,
            "consolidation": dict(self.consolidator.metrics.counts),
            "counts": dict(self.pipeline.metrics.counts),
            "model": self.models.active.name,
            "spend": dict(self.spend.metrics.counts),
            "webhooks": dict(self.webhooks.metrics.counts),
            "document_jobs": dict(self.document_jobs.counts),
        }

    async def aclose(self) -> None:
        """Stop and close what ``build_worker`` opened, newest first; one failure does not
        stop the rest (a document job cut here is claimed again after its lease)."""
        await close_all(self._closers, log, "worker")
