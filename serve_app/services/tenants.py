"""Tenant settings: read on every request (cached per replica), changed by admin keys.

Rate limits and chat models are read on the request path, so each replica keeps a
tenant's effective settings in memory. A change notifies ``memserve_tenants`` (the
settings row's trigger): every listening replica drops its copy at once, and while
its listener is down a replica reads the database each time (the same honest cache
as API keys: :class:`~serve_app.store.key_cache.KeyCache`). Extractor replicas keep
one too (guidance, quotas and retention of extraction's writes). Without a listener
nothing is cached: every read goes to the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

from psycopg.errors import UniqueViolation
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from serve_app.auth import Principal
from serve_app.db.listener import NotifyListener
from serve_app.errors import ApiError, describe
from serve_app.settings import Settings
from serve_app.store.key_cache import NEW_KEY, KeyCache
from serve_app.store.llm_spend import Limits
from serve_app.store.quota import Quota
from serve_app.store.tenants import TENANTS_CHANNEL, SettingsConflict, TenantStore
from serve_app.tenancy import (
    Effective,
    ExtractionGuidance,
    TenantSettings,
    canonical,
    changes,
    environment,
    merge_patch,
    resolve,
)


def _actor(caller: Principal | None) -> tuple[str, UUID | None]:
    return ("cli", None) if caller is None else (caller.actor, UUID(caller.key_id))


class TenantService:
    def __init__(
        self,
        store: TenantStore,
        settings: Settings,
        chat_models: Iterable[str] = (),
        cache: KeyCache | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.env = environment(settings, chat_models)
        TenantSettings.model_validate(self.env)  # a bad environment fails at start-up
        self.default = resolve({}, self.env)
        # Called with a tenant id whenever its settings change (this replica's change or a
        # notification; "" for all): the token verifier drops what it derived from them.
        self.on_change: list[Callable[[str], None]] = []

    def changed(self, tenant_id: str) -> None:
        """Forget what is cached of ``tenant_id`` ("": of every tenant)."""
        if self.cache is not None:
            self.cache.drop(tenant_id) if tenant_id else self.cache.clear()
        for hook in self.on_change:
            hook(tenant_id)

    # ---------- what consumers read ----------

    async def effective(self, tenant_id: str) -> Effective:
        """The tenant's settings over the environment's (cached while trustworthy)."""
        cache = self.cache
        if cache is not None and (hit := cache.get(tenant_id)) is not None:
            return hit["effective"]
        token = cache.token() if cache is not None else (0, 0)
        row = await self.store.settings(tenant_id)
        out = resolve(row["settings"], self.env) if row and row["settings"] else self.default
        if cache is not None:
            cache.put(tenant_id, {"effective": out}, token)
        return out

    async def quotas(self, tenant_id: str) -> tuple[Quota, Quota]:
        """(memory quota, fact quota): the GuardedWriter's per-tenant quotas."""
        eff = await self.effective(tenant_id)
        return eff.memory_quota, eff.fact_quota

    async def retention(self, tenant_id: str) -> Mapping[str, float]:
        """Seconds a new memory lives per type (the GuardedWriter's per-tenant retention)."""
        return (await self.effective(tenant_id)).retention_s

    async def chat_models(self, tenant_id: str) -> frozenset[str]:
        return (await self.effective(tenant_id)).chat_models

    async def guidance(self, tenant_id: str) -> ExtractionGuidance:
        return (await self.effective(tenant_id)).guidance

    async def budgets(self, tenant_id: str) -> Mapping[str, Limits]:
        """LLM token budgets per purpose group (serve_app/spend/meter.py)."""
        return (await self.effective(tenant_id)).budgets

    # ---------- the admin API ----------

    async def read(self, tenant_id: str) -> dict[str, Any]:
        """Overrides, version and the effective document (environment + overrides)."""
        row = await self.store.settings(tenant_id) or {
            "settings": {},
            "version": 0,
            "updated_at": None,
            "updated_by": None,
        }
        return {
            "tenant_id": tenant_id,
            "version": row["version"],
            "updated_at": row["updated_at"],
            "updated_by": row["updated_by"],
            "settings": row["settings"],
            "effective": merge_patch(self.env, row["settings"]),
        }

    async def replace(
        self, tenant_id: str, doc: Any, caller: Principal | None, version: int | None = None
    ) -> dict[str, Any]:
        """PUT: ``doc`` becomes the tenant's overrides (whatever it does not set: the env's)."""
        return await self._change(tenant_id, lambda _: doc, caller, version)

    async def patch(
        self, tenant_id: str, patch: Any, caller: Principal | None, version: int | None = None
    ) -> dict[str, Any]:
        """PATCH: a JSON merge patch of the overrides (null: back to the environment's)."""
        if not isinstance(patch, dict):
            raise ApiError(422, "invalid_request", "a merge patch is a JSON object")
        return await self._change(tenant_id, lambda old: merge_patch(old, patch), caller, version)

    async def _change(self, tenant_id, make, caller, version) -> dict[str, Any]:
        actor, key_id = _actor(caller)

        def change(old: dict[str, Any]) -> dict[str, Any]:
            try:
                return canonical(make(old))
            except ValidationError as exc:  # the caller's 422, with the field's path
                raise ApiError(422, "invalid_request", describe(exc.errors())) from None

        try:
            await self.store.change(
                tenant_id, change, actor=actor, key_id=key_id, expected_version=version
            )
        except SettingsConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        except UniqueViolation:  # trusted_issuers' key: the pair is another tenant's
            raise ApiError(
                409,
                "issuer_taken",
                "an issuer and audience of identity.issuers is trusted"
                " by another tenant (issuer + audience select the tenant: pick another audience)",
            ) from None
        self.changed(tenant_id)  # here at once; other replicas via NOTIFY
        return await self.read(tenant_id)

    async def history(
        self, tenant_id: str, *, limit: int, before_version: int | None = None
    ) -> list[dict[str, Any]]:
        rows = await self.store.history(tenant_id, limit=limit, before_version=before_version)
        return [
            {
                "version": r["version"],
                "changed_at": r["changed_at"],
                "changed_by": r["changed_by"],
                "actor": r["actor"],
                "changes": changes(r["old_settings"], r["new_settings"]),
                "old": r["old_settings"],
                "new": r["new_settings"],
            }
            for r in rows
        ]


def tenant_service(
    pool: AsyncConnectionPool, dsn: str, settings: Settings, chat_models: Iterable[str] = ()
) -> tuple[TenantService, NotifyListener]:
    """The replica's tenant settings with their cache, kept honest by a started listener."""
    s = settings.auth
    cache = KeyCache(s.cache_ttl_s, s.cache_max_keys)
    service = TenantService(TenantStore(pool), settings, chat_models, cache)
    listener = NotifyListener(
        dsn,
        TENANTS_CHANNEL,
        # (a tenant id that looks like a new key's payload is dropped with everything)
        lambda tenant: service.changed("" if tenant.startswith(NEW_KEY) else tenant),
        on_connect=lambda: service.changed(""),
        ping_s=s.listener_ping_s,
        stale_s=s.listener_stale_s,
    )
    cache.trusted = listener.healthy
    listener.start()
    return service, listener
