"""Extractor deployment: LLM memory extraction off the chat path.

Thin wrapper around :class:`serve_app.extraction.ExtractionPipeline` and its
:class:`SessionScheduler`. ``process`` only schedules work and returns at once
(the ingress fires it and forgets); the work itself runs in background tasks of
the replica, bounded by ``extract_concurrency``. On start-up and every
``extract_scan_interval_s`` the replica re-scans the durable queue (session
turns with ``extracted_at IS NULL``), so triggers lost to an LLM outage, a
crash or a restart are made up for.

A model change (serve_app/reembed): the replica embeds with the registry's active model
(:class:`ModelView`) and rebuilds its pipeline over the new table when it switches; it
also runs the re-embed worker (:class:`Reembedder`), of which one holds the cluster-wide
lock and fills the new model's table through the Embedder.

It also runs the document job worker (:class:`DocumentJobWorker`, issue 33): big
documents the Ingress accepted with a 202 are claimed from ``document_jobs``, embedded
through the Embedder in slices and written here, off the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from serve_app.consolidation.job import Consolidator, run_due
from serve_app.db.pool import open_pool
from serve_app.db.resolve import resolve_dsn
from serve_app.extraction.llm import LLMClient
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.extraction.scheduler import SessionScheduler
from serve_app.metrics import (
    ConsolidationMetrics,
    DocumentJobMetrics,
    ExtractionMetrics,
    Flusher,
    ReembedMetrics,
    WebhookMetrics,
    start_pool_metrics,
)
from serve_app.model_facts import ModelFacts
from serve_app.periodic import Periodic
from serve_app.profile.classify import ProfileClassifier
from serve_app.reembed.view import ModelView
from serve_app.reembed.worker import Reembedder
from serve_app.services.document_jobs import DocumentJobWorker
from serve_app.services.documents import DocumentService, document_service
from serve_app.services.tenants import tenant_service
from serve_app.settings import get_settings
from serve_app.spend.meter import SpendMeter
from serve_app.store.guarded import GuardedWriter
from serve_app.store.llm_spend import SpendStore
from serve_app.store.turns import SessionKey
from serve_app.webhooks.worker import DispatcherThread

log = logging.getLogger("ray.serve")


@serve.deployment(max_ongoing_requests=1000)
class Extractor:
    async def __init__(self, model: ModelFacts, embedder: DeploymentHandle) -> None:
        settings = get_settings()
        dsn = resolve_dsn(settings)  # launcher's DSN, else the embedded server (`serve run`)
        self.settings = settings
        self.embedder = embedder
        self.pool = await open_pool(dsn, settings)
        self.pool_metrics = start_pool_metrics(
            self.pool, "extractor", settings.db.metrics_interval_s
        )
        config = settings.llm
        self.metrics = ExtractionMetrics()
        reembed_metrics = ReembedMetrics()
        self.consolidation_metrics = ConsolidationMetrics()
        webhook_metrics = WebhookMetrics()
        document_job_metrics = DocumentJobMetrics()
        self.flusher = Flusher(
            [self.metrics, reembed_metrics, self.consolidation_metrics, webhook_metrics,
             document_job_metrics]
        ).start()  # fmt: skip
        # Webhook delivery of the event outbox: beside the writes, never in them, on a
        # thread of its own at a lower CPU priority (background work yields).
        self.webhooks = DispatcherThread(dsn, settings, webhook_metrics)
        self.models = ModelView(
            self.pool, dsn, model, poll_s=settings.reembed.poll_s, on_switch=self._switch
        )
        # Tenant settings (prompt guidance, quotas, retention), cached and kept honest by NOTIFY.
        self.tenants, self.tenant_listener = tenant_service(self.pool, dsn, settings)
        # Every LLM call metered and held to the tenant's budgets (serve_app/spend/meter.py);
        # this replica also closes intents dead replicas left open and prunes old rows.
        self.spend = SpendMeter(SpendStore(self.pool), settings.spend, self.tenants.budgets)
        self._spend_upkeep = Periodic(self.spend.maintain, settings.spend.reconcile_interval_s,
                                      log=log, failed="LLM spend upkeep failed")  # fmt: skip
        self._spend_upkeep.start()
        self.llm = LLMClient(config, meter=self.spend) if config.base_url else None
        self.pipeline = self._pipeline(model)
        ex = settings.extract
        self.scheduler = SessionScheduler(
            self.pipeline,
            ex.concurrency,
            tenant_concurrency=ex.tenant_concurrency,
            max_queued=ex.max_queued,
        )
        self.consolidator = self._consolidator(model)
        self._consolidating = Periodic(
            self._consolidate_due,
            settings.consolidate.interval_s,
            log=log,
            failed="periodic consolidation failed",
            level=logging.ERROR,
        )
        self._consolidating.start()
        self.models.start()
        self.reembed = Reembedder(dsn, self._embed_docs, settings.reembed, reembed_metrics)
        self._reembed_task = asyncio.ensure_future(self.reembed.run())
        self.scheduler.start_scanning(settings.extract.scan_interval_s)
        self.webhooks.start()
        # Big documents accepted as jobs by the Ingress (202): embedded and written here.
        self.document_jobs = DocumentJobWorker(
            self._documents(model), settings.documents, metrics=document_job_metrics
        )
        self.document_jobs.start()
        log.info(
            "extractor ready: %s",
            f"LLM {config.model} at {config.base_url}" if self.llm else "disabled (no LLM)",
        )

    def _pipeline(self, model: ModelFacts) -> ExtractionPipeline:
        embed = functools.partial(self._embed, model=model)  # its vectors go with its table
        return ExtractionPipeline(
            self.pool,
            model.table_slug,
            embed,
            self.llm,
            self.settings,
            self.metrics,
            guidance=self.tenants.guidance,
            writer=self._writer(model),
        )

    def _writer(self, model: ModelFacts) -> GuardedWriter:
        """The one write path, with each tenant's quotas and retention (its settings)."""
        return GuardedWriter.from_settings(
            self.pool,
            model.table_slug,
            self.settings,
            quotas=self.tenants.quotas,
            retention=self.tenants.retention,
            # profile classes of memories the model gave none (its table's model)
            classifier=ProfileClassifier(functools.partial(self._embed, model=model)),
        )

    def _consolidator(self, model: ModelFacts) -> Consolidator:
        embed = functools.partial(self._embed, model=model)
        return Consolidator(self.pool, model.table_slug, embed, self.llm,
                            self.settings.consolidate, self.consolidation_metrics,
                            writer=self._writer(model))  # fmt: skip

    def _documents(self, model: ModelFacts) -> DocumentService:
        """The document service the job worker writes through (``model``'s table)."""
        embed = functools.partial(self._embed, model=model)
        return document_service(self.pool, self._writer(model), embed, self.settings, model)

    def _switch(self, model: ModelFacts) -> None:
        """The active model changed: new work reads and writes its table (work in flight
        finishes on the old one; the worker's settle passes pick up what it writes)."""
        self.pipeline = self.scheduler.pipeline = self._pipeline(model)
        self.consolidator = self._consolidator(model)
        self.document_jobs.documents = self._documents(model)

    async def _embed(
        self, texts: Sequence[str], *, is_query: bool, model: ModelFacts, bulk: bool = False
    ) -> np.ndarray:
        """``bulk``: the Embedder's bulk lane (the document job worker's chunks)."""
        ref = model.ref or None
        vectors = await self.embedder.embed_many.remote(list(texts), is_query, ref, bulk)
        return np.asarray(vectors, dtype=np.float32)

    async def _embed_docs(self, texts: list[str], model: str) -> np.ndarray:
        """The re-embed worker's call: documents of the model being filled (bulk lane:
        a re-embed never holds the encoder ahead of queries and memory writes)."""
        return np.asarray(await self.embedder.embed_many.remote(texts, False, model, True))

    async def reembed_now(self, max_batches: int | None = None) -> str:
        """One turn of the re-embed worker now (tests, operators): see Reembedder.run_once."""
        return await self.reembed.run_once(max_batches=max_batches)

    async def process(self, tenant_id: str, user_id: str, session_id: str, force: bool = False):
        """Schedule extraction of the session's pending turns; returns at once."""
        self.scheduler.submit(SessionKey(tenant_id, user_id, session_id), force)
        return "accepted"

    async def process_now(
        self, tenant_id: str, user_id: str, session_id: str, force: bool = False
    ) -> dict[str, Any]:
        """Run (or join) the session's extraction and return its outcome (tests, tools)."""
        outcome = await self.scheduler.submit(SessionKey(tenant_id, user_id, session_id), force)
        return outcome.as_dict() if outcome else {}

    async def scan_now(self) -> int:
        """Re-scan the durable queue now and wait for the work (tests, operators)."""
        n = await self.scheduler.scan_once()
        await self.scheduler.drain()
        return n

    async def document_jobs_now(self) -> int:
        """Claim document jobs now and wait for them (tests, operators); how many."""
        n = await self.document_jobs.run_once()
        await self.document_jobs.drain()
        return n

    async def _consolidate_due(self) -> None:
        c = self.settings.consolidate
        await run_due(self.consolidator, c.min_interval_s, c.users_per_tick)

    async def status(self) -> dict[str, Any]:
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

    async def spend_upkeep_now(self) -> int:
        """Close stale LLM-call intents and prune now (tests, operators); how many closed."""
        return await self.spend.maintain()

    async def __del__(self) -> None:
        if getattr(self, "document_jobs", None) is not None:
            await self.document_jobs.stop()  # a job cut here is claimed again after its lease
        if getattr(self, "webhooks", None) is not None:
            await self.webhooks.stop()
        if getattr(self, "_consolidating", None) is not None:
            await self._consolidating.stop()
        if getattr(self, "_spend_upkeep", None) is not None:
            await self._spend_upkeep.stop()
        task = getattr(self, "_reembed_task", None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if getattr(self, "models", None) is not None:
            await self.models.stop()
        if getattr(self, "tenant_listener", None) is not None:
            await self.tenant_listener.stop()
        if getattr(self, "flusher", None) is not None:
            await self.flusher.stop()
        if getattr(self, "pool_metrics", None) is not None:
            await self.pool_metrics.stop()
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None:
            await scheduler.stop()
        if getattr(self, "llm", None) is not None:
            await self.llm.close()
        if getattr(self, "spend", None) is not None:
            await self.spend.aclose()
        pool = getattr(self, "pool", None)
        if pool is not None:
            await pool.close()
