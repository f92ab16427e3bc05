"""The Ingress's services as routes and the MCP tools receive them (``Depends``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from serve_app.closing import Closer, close_all
from serve_app.documents.fetch import DocumentFetcher
from serve_app.services.auth import Authenticator
from serve_app.services.chat import ChatService
from serve_app.services.context import ContextService
from serve_app.services.documents import DocumentService
from serve_app.services.embedding_models import EmbeddingModelService
from serve_app.services.events import EventFeed
from serve_app.services.facts import FactService
from serve_app.services.health import HealthService
from serve_app.services.lifecycle import Lifecycle
from serve_app.services.llm_usage import LlmUsageService
from serve_app.services.maintenance import MaintenanceService
from serve_app.services.memories import MemoryService
from serve_app.services.portability import PortabilityService
from serve_app.services.rerank import RerankService
from serve_app.services.sessions import SessionService
from serve_app.services.tenant_directory import TenantDirectory
from serve_app.services.tenant_settings import TenantService
from serve_app.services.webhooks import WebhookService
from serve_app.settings import Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store.keys import KeyStore
from serve_app.store.users import UserDirectory

log = logging.getLogger(__name__)


@dataclass
class Services:
    """Everything a route may ask for; built by the composition root
    (``serve_app.composition.build_services``), closed by :meth:`aclose`."""

    settings: Settings
    auth: Authenticator
    keys: KeyStore
    memories: MemoryService
    sessions: SessionService
    facts: FactService
    context: ContextService
    chat: ChatService
    health: HealthService
    directory: TenantDirectory  # reads across a tenant's owners (the mem0 routes)
    portability: PortabilityService  # export/import
    maintenance: MaintenanceService  # dead letters, consolidation (admin)
    lifecycle: Lifecycle  # forget, access tracking, expiry purge, quotas
    tenants: TenantService  # per-tenant settings over the env defaults
    users: UserDirectory  # the tenant's users and sessions (GET /v1/users)
    spend: SpendMeter  # LLM use per tenant/end user, budgets (GET /v1/admin/usage)
    events: EventFeed  # the change feed (GET /v1/events)
    webhooks: WebhookService  # webhook subscriptions (/v1/admin/webhooks)
    documents: DocumentService  # the knowledge base (/v1/documents)
    fetcher: DocumentFetcher  # documents named by URL (mem0 document messages)
    rerank: RerankService  # the ``rerank`` option of search and context
    embedding_models: EmbeddingModelService  # vector tables (/v1/admin/models)
    llm_usage: LlmUsageService  # what LLM calls spent (GET /v1/admin/usage)
    _closers: list[Closer] = field(default_factory=list, repr=False)

    async def aclose(self) -> None:
        """Close what the root opened, newest first; one failure does not stop the rest."""
        await close_all(self._closers, log, "service")
