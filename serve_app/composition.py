"""The composition roots: every part of a replica built once, closed once, in order.

``build_services`` (an Ingress replica) opens what the replica needs (database pool,
key-revocation listener, pool metrics) and wires the plain-Python services together;
routes get them through FastAPI ``Depends`` (``serve_app.api.deps``). Everything that
talks to other deployments arrives as a :class:`Backends` of plain callables, so the
same root serves the Ray Ingress and in-process tests. ``build_worker`` (an Extractor
replica) builds and starts the background roles of :class:`serve_app.worker.Worker`.
A step that fails closes what the steps before it opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app import language
from serve_app.bootstrap import ModelFacts
from serve_app.closing import Closer, close_all
from serve_app.consolidation.job import Consolidator, consolidation_llm
from serve_app.context import ContextBuilder
from serve_app.context.topics import Topics
from serve_app.db.pool import open_pool
from serve_app.documents.fetch import DocumentFetcher
from serve_app.extraction.scheduler import SessionScheduler
from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.identity.issuers import Issuer
from serve_app.identity.jwks import JwksCache, JwksFetcher
from serve_app.identity.verifier import TokenVerifier
from serve_app.llm.client import LLMClient
from serve_app.metrics import (
    ConsolidationMetrics,
    DocumentJobMetrics,
    ExtractionMetrics,
    Flusher,
    IngestMetrics,
    ReembedMetrics,
    WebhookMetrics,
    start_pool_metrics,
)
from serve_app.periodic import Periodic
from serve_app.profile.classify import ProfileClassifier
from serve_app.reembed.view import ModelView
from serve_app.reembed.worker import Reembedder
from serve_app.retrieval.rerank import build_reranker
from serve_app.services.auth import authenticator, key_store
from serve_app.services.backends import Backends
from serve_app.services.chat import ChatService
from serve_app.services.chat_caps import allowed_models
from serve_app.services.chat_usage import ChatUsageMeter
from serve_app.services.context import ContextService
from serve_app.services.document_jobs import DocumentJobWorker
from serve_app.services.documents import document_service
from serve_app.services.embedding_models import EmbeddingModelService
from serve_app.services.events import EventFeed
from serve_app.services.facts import FactService
from serve_app.services.health import HealthService
from serve_app.services.ingest_pipeline import IngestPipeline
from serve_app.services.lifecycle import build_lifecycle
from serve_app.services.llm_usage import LlmUsageService
from serve_app.services.maintenance import MaintenanceService
from serve_app.services.memories import MemoryService
from serve_app.services.portability import PortabilityService
from serve_app.services.registry import Services
from serve_app.services.rerank import RerankService
from serve_app.services.sessions import SessionService
from serve_app.services.tenant_directory import TenantDirectory
from serve_app.services.tenant_settings import TenantService, tenant_service
from serve_app.services.webhooks import WebhookService
from serve_app.settings import IdentitySettings, Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store.chat_usage import ChatUsageStore
from serve_app.store.directory import MemoryDirectory
from serve_app.store.events import EventStore
from serve_app.store.guarded import GuardedWriter
from serve_app.store.issuers import IssuerIndex
from serve_app.store.llm_spend import SpendStore
from serve_app.store.profile import ProfileStore
from serve_app.store.turns import TurnStore
from serve_app.store.users import UserDirectory
from serve_app.store.webhooks import WebhookStore
from serve_app.webhooks.worker import DispatcherThread
from serve_app.worker import EmbedMany, Worker

log = logging.getLogger(__name__)


def rerank_llm(settings: Settings, meter: SpendMeter) -> LLMClient | None:
    """The LLM of the ``llm`` re-scoring back-end: the extraction LLM, metered, with no
    retries (a caller waits on it; a failed call falls back to the search order)."""
    if "llm" not in settings.rerank.backends or not settings.llm.base_url:
        return None
    return LLMClient(settings.llm.model_copy(update={"max_retries": 0}), meter=meter)


def token_verifier(
    pool: AsyncConnectionPool, tenants: TenantService, s: IdentitySettings
) -> TokenVerifier:
    """The replica's verifier of end users' tokens (JWTs of a tenant's trusted issuers);
    its JWKS client is closed by ``verifier.jwks.fetcher.aclose``.

    What it caches from the tenants' settings is trusted only while their listener is
    healthy, and dropped whenever a tenant's settings change."""

    async def issuers(tenant_id: str) -> tuple[Issuer, ...]:
        return (await tenants.effective(tenant_id)).issuers

    cache = tenants.cache
    verifier = TokenVerifier(
        IssuerIndex(pool),
        issuers,
        JwksCache(JwksFetcher(s), s),
        s,
        trusted=(lambda: cache.enabled) if cache is not None else (lambda: False),
    )
    tenants.on_change.append(verifier.forget)
    return verifier


async def build_services(
    settings: Settings,
    model: ModelFacts,
    dsn: str,
    backends: Backends,
    *,
    component: str = "ingress",
) -> Services:
    closers: list[Closer] = []
    pool: AsyncConnectionPool = await open_pool(dsn, settings)
    closers.append(pool.close)
    try:
        pool_metrics = start_pool_metrics(pool, component, settings.db.metrics_interval_s)
        closers.append(pool_metrics.stop)

        keys, key_listener = key_store(pool, dsn, settings.auth)
        closers.append(key_listener.stop)
        tenants, tenant_listener = tenant_service(
            pool, dsn, settings, allowed_models(settings.chat, settings.llm.model)
        )
        closers.append(tenant_listener.stop)
        tokens = token_verifier(pool, tenants, settings.identity)  # JWTs of trusted issuers
        closers.append(tokens.jwks.fetcher.aclose)

        lifecycle = build_lifecycle(pool, settings, model.table_slug)
        closers.extend(lifecycle.closers)
        # The one write path of memories and facts (guards, quotas, validation, history).
        writer = GuardedWriter.from_settings(  # quotas and retention: the tenant's settings
            pool,
            model.table_slug,
            settings,
            quotas=tenants.quotas,
            retention=tenants.retention,
            classifier=ProfileClassifier.from_settings(backends.embed, settings.context),
        )
        ingest_metrics = IngestMetrics()
        closers.append(ingest_metrics.flusher.stop)
        memories = MemoryService(
            writer,
            backends.embed,
            backends.search,
            session_ttl_s=settings.context.session_ttl_s,
            access=lifecycle.access,
            pipeline=IngestPipeline(  # a connection each: half the pool at most
                writer,
                backends.embed,
                settings.ingest.pipeline_chunk,
                max_open=max(1, settings.db.pool_max // 2),
                metrics=ingest_metrics,
            ),
        )
        trigger = ExtractionTrigger(
            backends.submit_extraction,
            enabled=bool(settings.llm.base_url),
            every_n=settings.extract.every_n_turns,
            run=backends.run_extraction,
        )
        # Every LLM call of this replica (chat proxy, admin-run consolidation) is metered
        # against the tenant's budgets; closed after the chat service (newest first).
        spend = SpendMeter(SpendStore(pool), settings.spend, tenants.budgets)
        closers.append(spend.aclose)
        sessions = SessionService(
            TurnStore(pool),
            trigger,
            turn_ttl_hours=settings.extract.turn_ttl_hours,
            spend=spend,
        )
        rerank = RerankService(
            build_reranker(settings.rerank, rerank_llm(settings, spend)), tenants.effective
        )
        closers.append(rerank.close)
        await _load_language(settings)
        profiles = ProfileStore(pool)
        context = ContextService(
            ContextBuilder(
                memories.search_many,
                writer.facts.active,
                profiles.members,
                memories.cite,
                Topics(backends.embed, settings.context.topics),
            ),
            settings.context,
        )
        chat = ChatService(
            settings.llm,
            settings.limits,
            context,
            sessions,
            caps=settings.chat,
            usage=ChatUsageMeter(
                ChatUsageStore(pool),
                flush_s=settings.chat.usage_flush_s,
                max_pending=settings.chat.usage_max_pending,
            ),
            models_for=tenants.chat_models,
            spend=spend,
        )
        closers.append(chat.aclose)
        fetcher = DocumentFetcher(settings.fetch)  # one client per replica
        closers.append(fetcher.aclose)
        directory = MemoryDirectory(pool)
        documents = document_service(pool, writer, backends.embed, settings, model)
        portability = PortabilityService(
            memories,
            writer,
            directory,
            max_records=settings.limits.import_records,
            documents=documents,
        )
        maintenance = MaintenanceService(
            TurnStore(pool),
            trigger,
            Consolidator(
                pool,
                model.table_slug,
                memories.embed,
                consolidation_llm(settings, spend),
                settings.consolidate,
                writer=writer,
            ),
            writer,
            settings.context.profile_classify_max,
        )
        if maintenance.consolidator.llm is not None:
            closers.append(maintenance.consolidator.llm.close)
        return Services(
            settings=settings,
            auth=authenticator(keys, settings.auth, tokens),
            keys=keys,
            memories=memories,
            sessions=sessions,
            facts=FactService(writer),
            context=context,
            chat=chat,
            health=HealthService(pool, backends.probes),
            lifecycle=lifecycle,
            directory=TenantDirectory(directory, settings.limits.entities_listed),
            portability=portability,
            maintenance=maintenance,
            tenants=tenants,
            users=UserDirectory(pool),
            spend=spend,
            events=EventFeed(EventStore(pool)),
            webhooks=WebhookService(WebhookStore(pool), settings.webhooks),
            documents=documents,
            fetcher=fetcher,
            rerank=rerank,
            embedding_models=EmbeddingModelService(pool, settings.default_tenant),
            llm_usage=LlmUsageService(SpendStore(pool), settings.spend),
            _closers=closers,
        )
    except BaseException:
        await close_all(closers, log, "half-built replica")
        raise


async def _load_language(settings: Settings) -> None:
    """The language detector's model (about 0.8 s of CPU), loaded once at start-up off the
    event loop where something reads languages: the foreign-message guard, or the learned
    profile rule on the write path (else the first message or write would pay it)."""
    if settings.context.foreign_guard or settings.context.profile_learned:
        await asyncio.to_thread(language.load)


async def build_worker(
    settings: Settings, model: ModelFacts, dsn: str, embed_many: EmbedMany
) -> Worker:
    """The worker replica's roles (serve_app/worker.py), built and started in order; a
    step that fails closes everything opened before it, newest first, and raises."""
    closers: list[Closer] = []
    pool: AsyncConnectionPool = await open_pool(dsn, settings)
    closers.append(pool.close)
    try:
        pool_metrics = start_pool_metrics(pool, "extractor", settings.db.metrics_interval_s)
        closers.append(pool_metrics.stop)
        metrics, consolidation_metrics = ExtractionMetrics(), ConsolidationMetrics()
        reembed_metrics, webhook_metrics = ReembedMetrics(), WebhookMetrics()
        document_job_metrics = DocumentJobMetrics()
        flusher = Flusher(
            [
                metrics,
                reembed_metrics,
                consolidation_metrics,
                webhook_metrics,
                document_job_metrics,
            ]
        ).start()
        closers.append(flusher.stop)
        # Tenant settings (prompt guidance, quotas, retention), cached and kept honest by
        # NOTIFY.
        tenants, tenant_listener = tenant_service(pool, dsn, settings)
        closers.append(tenant_listener.stop)
        # Every LLM call metered and held to the tenant's budgets; this replica also closes
        # intents dead replicas left open and prunes old rows.
        spend = SpendMeter(SpendStore(pool), settings.spend, tenants.budgets)
        closers.append(spend.aclose)
        llm = LLMClient(settings.llm, meter=spend) if settings.llm.base_url else None
        if llm is not None:
            closers.append(llm.close)
        models = ModelView(pool, dsn, model, poll_s=settings.reembed.poll_s)
        await _load_language(settings)  # the writer's profile rule reads memories' language
        worker = Worker(
            settings=settings,
            pool=pool,
            embed_many=embed_many,
            tenants=tenants,
            spend=spend,
            llm=llm,
            models=models,
            metrics=metrics,
            consolidation_metrics=consolidation_metrics,
            # Webhook delivery of the event outbox: beside the writes, never in them, on a
            # thread of its own at a lower CPU priority (background work yields).
            webhooks=DispatcherThread(dsn, settings, webhook_metrics),
        )
        worker.reembed = Reembedder(dsn, worker.embed_documents, settings.reembed, reembed_metrics)
        worker.pipeline = worker.pipeline_for(model)
        ex = settings.extract
        worker.scheduler = SessionScheduler(
            worker.pipeline,
            ex.concurrency,
            tenant_concurrency=ex.tenant_concurrency,
            max_queued=ex.max_queued,
        )
        closers.append(worker.scheduler.stop)
        worker.consolidator = worker.consolidator_for(model)
        worker.document_jobs = DocumentJobWorker(
            worker.documents_for(model), settings.documents, metrics=document_job_metrics
        )
        spend_upkeep = Periodic(
            spend.maintain,
            settings.spend.reconcile_interval_s,
            log=log,
            failed="LLM spend upkeep failed",
        )
        spend_upkeep.start()
        closers.append(spend_upkeep.stop)
        consolidating = Periodic(
            worker.consolidate_due,
            settings.consolidate.interval_s,
            log=log,
            failed="periodic consolidation failed",
            level=logging.ERROR,
        )
        consolidating.start()
        closers.append(consolidating.stop)
        models.on_switch = worker.switch
        models.start()
        closers.append(models.stop)
        reembedding = asyncio.ensure_future(worker.reembed.run())
        closers.append(functools.partial(_cancel, reembedding))
        worker.scheduler.start_scanning(ex.scan_interval_s)
        worker.webhooks.start()
        closers.append(worker.webhooks.stop)
        # Big documents accepted as jobs by the Ingress (202): embedded and written here.
        worker.document_jobs.start()
        closers.append(worker.document_jobs.stop)
        worker._closers = closers
        return worker
    except BaseException:
        await close_all(closers, log, "half-built replica")
        raise


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
