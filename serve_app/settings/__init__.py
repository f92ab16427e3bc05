"""All runtime settings, one group per component, each default stated once.

Values come from ``MEMSERVE_*`` environment variables (the names in DESIGN §8
are a contract, and every other name is kept stable: a group's prefix plus the
field name, or the field's alias where the historic name differs). Components
take their own group (``settings.embed``, ``settings.retrieval``, ...). Scaling
(replicas, CPUs, GPUs, autoscaling) lives in the Serve config, not here; the
embedder's batching may be hot-reloaded through its Serve ``user_config``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from serve_app.settings.base import default_data_dir
from serve_app.settings.documents import DocumentSettings
from serve_app.settings.fetch import FetchSettings
from serve_app.settings.jobs import (
    ConsolidateSettings,
    ExtractSettings,
    LifecycleSettings,
    LLMSettings,
    QuotaSettings,
    ReembedSettings,
    WebhookSettings,
)
from serve_app.settings.rerank import RerankSettings
from serve_app.settings.retrieval import (
    CONTEXT_PRESETS,
    CacheSettings,
    ContextSettings,
    EmbedSettings,
    RankSettings,
    RetrievalSettings,
    preset_env,
)
from serve_app.settings.serving import (
    AuthSettings,
    ChatSettings,
    DatabaseSettings,
    IdentitySettings,
    IngestSettings,
    LimitSettings,
    ServingSettings,
)
from serve_app.settings.spend import SpendSettings

__all__ = [
    "CONTEXT_PRESETS",
    "preset_env",
    "AuthSettings",
    "CacheSettings",
    "ChatSettings",
    "ConsolidateSettings",
    "ContextSettings",
    "DatabaseSettings",
    "DocumentSettings",
    "EmbedSettings",
    "ExtractSettings",
    "FetchSettings",
    "IdentitySettings",
    "IngestSettings",
    "LLMSettings",
    "LifecycleSettings",
    "LimitSettings",
    "QuotaSettings",
    "RankSettings",
    "ReembedSettings",
    "RerankSettings",
    "RetrievalSettings",
    "ServingSettings",
    "Settings",
    "SpendSettings",
    "WebhookSettings",
    "get_settings",
]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMSERVE_", extra="ignore")

    # --- contract variables (DESIGN §8) and the service's identity ---
    database_url: str | None = None
    data_dir: Path = Field(default_factory=default_data_dir)
    bootstrap_key: str | None = None
    admin_key: str | None = None  # admin key of the default tenant (key management)
    default_tenant: str = "default"
    host: str = "127.0.0.1"
    port: int = 8000
    serve_config: Path | None = None  # Serve config YAML; default: the packaged one

    # --- one group per component ---
    serving: ServingSettings = Field(default_factory=ServingSettings)
    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rank: RankSettings = Field(default_factory=RankSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    quota: QuotaSettings = Field(default_factory=QuotaSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    extract: ExtractSettings = Field(default_factory=ExtractSettings)
    consolidate: ConsolidateSettings = Field(default_factory=ConsolidateSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    reembed: ReembedSettings = Field(default_factory=ReembedSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    spend: SpendSettings = Field(default_factory=SpendSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)  # documents by URL
    rerank: RerankSettings = Field(default_factory=RerankSettings)  # search/context re-scoring

    @property
    def models_dir(self) -> Path:
        return self.embed.models_cache or self.data_dir / "models"

    def with_(self, **groups: dict[str, Any]) -> Settings:
        """A copy with some groups' fields replaced: ``s.with_(retrieval={"fusion": "rrf"})``."""
        update = {g: getattr(self, g).model_copy(update=fields) for g, fields in groups.items()}
        return self.model_copy(update=update)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    from serve_app.secret_env import load_secrets_file

    load_secrets_file()  # this node's secrets (never shipped in Ray's runtime env)
    return Settings()
