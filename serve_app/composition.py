"""The composition root of an Ingress replica: every service built once, closed once.

``build_services`` opens what the replica needs (database pool, key-revocation
listener, pool metrics) and wires the plain-Python services together; routes get
them through FastAPI ``Depends`` (``serve_app.api.deps``). Everything that talks
to other deployments arrives as a :class:`Backends` of plain callables, so the
same root serves the Ray Ingress and in-process tests.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from serve_app.bootstrap import ModelFacts
from serve_app.consolidation.job import Consolidator, consolidation_llm
from serve_app.context import ContextBuilder
from serve_app.db.pool import open_pool
from serve_app.documents.fetch import DocumentFetcher
from serve_app.extraction.llm import LLMClient
from serve_app.extraction.trigger import ExtractionTrigger, Run, Submit
from serve_app.identity.wiring import token_verifier
from serve_app.metrics import IngestMetrics, start_pool_metrics
from serve_app.profile.classify import ProfileClassifier
from serve_app.retrieval.rerank import build_reranker
from serve_app.services.auth import Authenticator, authenticator, key_store
from serve_app.services.chat import ChatService
from serve_app.services.chat_caps import allowed_models
from serve_app.services.chat_usage import ChatUsageMeter
from serve_app.services.context import ContextService
from serve_app.services.documents import DocumentService, document_service
from serve_app.services.events import EventFeed
from serve_app.services.facts import FactService
from serve_app.services.health import HealthService, Probe
from serve_app.services.ingest_pipeline import IngestPipeline
from serve_app.services.lifecycle import Lifecycle, build_lifecycle
from serve_app.services.maintenance import MaintenanceService
from serve_app.services.memories import Embed, MemoryService, Search
from serve_app.services.portability import PortabilityService
from serve_app.services.rerank import RerankService
from serve_app.services.sessions import SessionService
from serve_app.services.tenants import TenantService, tenant_service
from serve_app.services.webhooks import WebhookService
from serve_app.settings import Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store.chat_usage import ChatUsageStore
from serve_app.store.directory import MemoryDirectory
from serve_app.store.events import EventStore
from serve_app.store.guarded import GuardedWriter
from serve_app.store.keys import KeyStore
from serve_app.store.llm_spend import SpendStore
from serve_app.store.profile import ProfileStore
from serve_app.store.turns import TurnStore
from serve_app.store.users import UserDirectory
from serve_app.store.webhooks import WebhookStore

log = logging.getLogger(__name__)
Closer = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Backends:
    """The other deployments, as plain callables (Ray handles in the Ingress)."""

    embed: Embed
    search: Search
    submit_extraction: Submit | None = None
    run_extraction: Run | None = None  # extract now and answer the outcome (mem0 add)
    probes: Mapping[str, Probe] = field(default_factory=dict)


@dataclass
class Services:
    """Everything a route may ask for; built by :func:`build_services`."""

    settings: Settings
    auth: Authenticator
    keys: KeyStore
    memories: MemoryService
    sessions: SessionService
    facts: FactService
    context: ContextService
    chat: ChatService
    health: HealthService
    directory: MemoryDirectory  # reads across a tenant's owners (mem0 routes, export)
    portability: PortabilityService  # export/import
    maintenance: MaintenanceService | None = None  # dead letters, consolidation (admin)
    lifecycle: Lifecycle | None = None  # forget, access tracking, expiry purge, quotas
    tenants: TenantService | None = None  # per-tenant settings over the env defaults
    users: UserDirectory | None = None  # the tenant's users and sessions (GET /v1/users)
    spend: SpendMeter | None = None  # LLM use per tenant/end user, budgets (GET /v1/admin/usage)
    events: EventFeed | None = None  # the change feed (GET /v1/events)
    webhooks: WebhookService | None = None  # webhook subscriptions (/v1/admin/webhooks)
    documents: DocumentService | None = None  # the knowledge base (/v1/documents)
    fetcher: DocumentFetcher | None = None  # documents named by URL (mem0 document messages)
    rerank: RerankService | None = None  # the ``rerank`` option of search and context
    _closers: list[Closer] = field(default_factory=list, repr=False)

    async def aclose(self) -> None:
        """Close what the root opened, newest first; one failure does not stop the rest."""
        while self._closers:
            closer = self._closers.pop()
            try:
                await closer()
            except Exception:
                log.warning("closing a service resource failed", exc_info=True)


def rerank_llm(settings: Settings, meter: SpendMeter) -> LLMClient | None:
    """The LLM of the ``llm`` re-scoring back-end: the extraction LLM, metered, with no
    retries (a caller waits on it; a failed call falls back to the search order)."""
    if "llm" not in settings.rerank.backends or not settings.llm.base_url:
        return None
    return LLMClient(settings.llm.model_copy(update={"max_retries": 0}), meter=meter)


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
            classifier=ProfileClassifier(backends.embed),  # profile classes at write time
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
        profiles = ProfileStore(pool)
        context = ContextService(
            ContextBuilder(
                memories.search_many, writer.facts.active, profiles.members, memories.cite
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
            memories, writer, directory, max_records=settings.limits.import_records,
            documents=documents,
        )  # fmt: skip
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
            ),  # fmt: skip
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
            directory=directory,
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
            _closers=closers,
        )
    except BaseException:
        for closer in reversed(closers):
            with contextlib.suppress(Exception):
                await closer()
        raise
