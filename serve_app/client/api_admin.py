"""``AdminApi``: the admin key's calls (keys, tenant settings and data, embedding models,
extraction dead letters, consolidation, webhooks); see ``api``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from serve_app.client.call import Call, if_match_header, with_body, with_params
from serve_app.client.endpoint import Endpoint
from serve_app.responses import (
    ConsolidationReport,
    DeadLetterList,
    LlmUsageReport,
    ModelDropped,
    ModelList,
    ProfileClassified,
    Retried,
    SettingsHistory,
    TenantSettingsView,
    Webhook,
    WebhookCreated,
    WebhookDeliveries,
    WebhookList,
    WebhookReplayed,
)
from serve_app.schemas import ApiKeyCreated, ApiKeyInfo, ApiKeyList, DeletedCount

SETTINGS = "/v1/admin/tenant/settings"


class AdminApi:
    """Calls that need an admin key; each acts within the key's own tenant."""

    # keys
    @Endpoint
    @staticmethod
    def create_key(role: str, *, user_id: str | None = None, **options: Any) -> Call[ApiKeyCreated]:
        """``options``: name, rate_limit_per_s. The secret (``key``) is shown only here."""
        body = {"role": role, "user_id": user_id, **options}
        return with_body("POST", "/v1/admin/keys", body, ApiKeyCreated)

    @Endpoint
    @staticmethod
    def list_keys() -> Call[ApiKeyList]:
        return Call("GET", "/v1/admin/keys", model=ApiKeyList)

    @Endpoint
    @staticmethod
    def get_key(key_id: UUID | str) -> Call[ApiKeyInfo]:
        return Call("GET", f"/v1/admin/keys/{key_id}", model=ApiKeyInfo)

    @Endpoint
    @staticmethod
    def revoke_key(key_id: UUID | str) -> Call[None]:
        return Call("DELETE", f"/v1/admin/keys/{key_id}")

    # tenant
    @Endpoint
    @staticmethod
    def erase_tenant(confirm: str) -> Call[DeletedCount]:
        """Erase every memory, fact, turn and session of the tenant (its keys stay);
        ``confirm`` must repeat the tenant id."""
        return with_params("DELETE", "/v1/admin/data", {"confirm": confirm}, DeletedCount)

    @Endpoint
    @staticmethod
    def tenant_settings() -> Call[TenantSettingsView]:
        """The tenant's overrides, their version and the effective settings."""
        return Call("GET", SETTINGS, model=TenantSettingsView)

    @Endpoint
    @staticmethod
    def replace_tenant_settings(
        settings: Mapping[str, Any], *, if_match: int | None = None
    ) -> Call[TenantSettingsView]:
        """Replace the overrides (what ``settings`` leaves out: the environment's value);
        ``if_match``: the version read (409 if they changed since)."""
        headers = if_match_header(if_match)
        return Call("PUT", SETTINGS, json=dict(settings), model=TenantSettingsView, headers=headers)

    @Endpoint
    @staticmethod
    def patch_tenant_settings(
        patch: Mapping[str, Any], *, if_match: int | None = None
    ) -> Call[TenantSettingsView]:
        """A JSON merge patch of the overrides (``None``: back to the environment's)."""
        headers = if_match_header(if_match)
        return Call("PATCH", SETTINGS, json=dict(patch), model=TenantSettingsView, headers=headers)

    @Endpoint
    @staticmethod
    def tenant_settings_history(
        *, limit: int | None = None, before: int | None = None
    ) -> Call[SettingsHistory]:
        """Every change, newest first; ``before``: versions older than this."""
        params = {"limit": limit, "before": before}
        return with_params("GET", f"{SETTINGS}/history", params, SettingsHistory)

    # embedding models (the default tenant's admin only: the tables are shared)
    @Endpoint
    @staticmethod
    def models() -> Call[ModelList]:
        """Every vector table: state (active, filling, retired) and re-embed progress."""
        return Call("GET", "/v1/admin/models", model=ModelList)

    @Endpoint
    @staticmethod
    def drop_model(slug: str) -> Call[ModelDropped]:
        """Drop a retired model's vector table (409 while it serves or fills)."""
        return Call("DELETE", f"/v1/admin/models/{slug}", model=ModelDropped)

    # extraction and consolidation
    @Endpoint
    @staticmethod
    def dead_letters(
        *, user_id: str | None = None, limit: int | None = None
    ) -> Call[DeadLetterList]:
        params = {"user_id": user_id, "limit": limit}
        return with_params("GET", "/v1/admin/extraction/dead-letters", params, DeadLetterList)

    @Endpoint
    @staticmethod
    def retry_dead_letters(
        *, user_id: str | None = None, session_id: str | None = None
    ) -> Call[Retried]:
        """Queue dead-lettered batches again (all, one user's, one session's)."""
        body = {"user_id": user_id, "session_id": session_id}
        return with_body("POST", "/v1/admin/extraction/dead-letters/retry", body, Retried)

    @Endpoint
    @staticmethod
    def consolidate(user_id: str) -> Call[ConsolidationReport]:
        """Consolidate one user now (merge, insights, digests, decay)."""
        body = {"user_id": user_id}
        return with_body("POST", "/v1/admin/consolidate", body, ConsolidationReport)

    @Endpoint
    @staticmethod
    def classify_profile(
        user_id: str, *, after: UUID | str | None = None
    ) -> Call[ProfileClassified]:
        """Apply today's profile rule to one user's memories written before it (a page a
        call; pass the answer's ``next`` as ``after`` until it is None)."""
        body = {"user_id": user_id, "after": str(after) if after is not None else None}
        return with_body("POST", "/v1/admin/profile/classify", body, ProfileClassified)

    # LLM spend
    @Endpoint
    @staticmethod
    def llm_usage(
        *,
        group_by: str | list[str] = "day",
        since: str | None = None,
        until: str | None = None,
        user_id: str | None = None,
        top_users: int | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> Call[LlmUsageReport]:
        """Tokens and calls of the tenant's LLM use (extract, summarize, consolidate,
        infer, chat), grouped by any of day, user, purpose, model; UTC days ``since``..
        ``until`` (ISO dates, inclusive); the ``top_users`` biggest spenders; paged by
        ``offset`` (the answer's ``next_offset``)."""
        groups = group_by if isinstance(group_by, str) else ",".join(group_by)
        params = {
            "group_by": groups,
            "since": since,
            "until": until,
            "user_id": user_id,
            "top_users": top_users,
            "limit": limit,
            "offset": offset,
        }
        return with_params("GET", "/v1/admin/usage", params, LlmUsageReport)

    # webhooks
    @Endpoint
    @staticmethod
    def create_webhook(
        url: str,
        *,
        types: list[str] | None = None,
        include_content: bool | None = None,
        enabled: bool | None = None,
    ) -> Call[WebhookCreated]:
        """Subscribe ``url`` to events (all, or ``types``); the answer's ``secret`` is
        shown once: keep it to verify ``webhook-signature``."""
        body = {"url": url, "types": types, "include_content": include_content, "enabled": enabled}
        return with_body("POST", "/v1/admin/webhooks", body, WebhookCreated)

    @Endpoint
    @staticmethod
    def webhooks() -> Call[WebhookList]:
        return Call("GET", "/v1/admin/webhooks", model=WebhookList)

    @Endpoint
    @staticmethod
    def get_webhook(webhook_id: UUID | str) -> Call[Webhook]:
        return Call("GET", f"/v1/admin/webhooks/{webhook_id}", model=Webhook)

    @Endpoint
    @staticmethod
    def update_webhook(
        webhook_id: UUID | str,
        *,
        url: str | None = None,
        types: list[str] | None = None,
        include_content: bool | None = None,
        enabled: bool | None = None,
    ) -> Call[Webhook]:
        body = {"url": url, "types": types, "include_content": include_content, "enabled": enabled}
        return with_body("PATCH", f"/v1/admin/webhooks/{webhook_id}", body, Webhook)

    @Endpoint
    @staticmethod
    def delete_webhook(webhook_id: UUID | str) -> Call[None]:
        return Call("DELETE", f"/v1/admin/webhooks/{webhook_id}")

    @Endpoint
    @staticmethod
    def webhook_deliveries(
        webhook_id: UUID | str, *, status: str | None = None, limit: int | None = None
    ) -> Call[WebhookDeliveries]:
        """The delivery log, newest first (``status``: pending, delivered or dead)."""
        path = f"/v1/admin/webhooks/{webhook_id}/deliveries"
        return with_params("GET", path, {"status": status, "limit": limit}, WebhookDeliveries)

    @Endpoint
    @staticmethod
    def replay_webhook(webhook_id: UUID | str) -> Call[WebhookReplayed]:
        """Send the subscription's dead deliveries again."""
        path = f"/v1/admin/webhooks/{webhook_id}/replay"
        return Call("POST", path, model=WebhookReplayed)
