"""Webhook subscriptions of a tenant (``/v1/admin/webhooks``): CRUD, delivery log, replay.

The signing secret is made here and shown once, in the answer to the create; reads
never return it. A URL is checked against the SSRF guard when it is set (a clear 422)
and again before every send (DNS may change).
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Sequence
from typing import Any

from serve_app.errors import ApiError
from serve_app.settings import WebhookSettings
from serve_app.store.events import EVENT_TYPES
from serve_app.store.webhooks import WebhookStore
from serve_app.webhooks.ssrf import Refused, TargetGuard

MAX_LOG = 500  # deliveries per log page; events replayed per call


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes, base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


class WebhookService:
    def __init__(self, store: WebhookStore, s: WebhookSettings) -> None:
        self.store = store
        self.s = s
        self.guard = TargetGuard(s.allowed_networks)

    async def _checked(self, url: str) -> str:
        try:
            await self.guard.check(url)
        except Refused as exc:
            raise ApiError(422, "invalid_request", f"url refused: {exc}") from None
        return url

    @staticmethod
    def _types(types: Sequence[str]) -> list[str]:
        unknown = sorted(set(types) - set(EVENT_TYPES))
        if unknown:
            raise ApiError(422, "invalid_request", f"unknown event types: {', '.join(unknown)}")
        return sorted(set(types))

    async def create(
        self, tenant_id: str, url: str, types: Sequence[str], include_content: bool, enabled: bool
    ) -> dict[str, Any]:
        secret = new_secret()
        row = await self.store.create(
            tenant_id,
            await self._checked(url),
            self._types(types),
            include_content,
            enabled,
            secret,
            limit=self.s.max_subscriptions,
        )
        if row is None:
            raise ApiError(409, "conflict", f"at most {self.s.max_subscriptions} subscriptions")
        return {**row, "secret": secret}

    async def list(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's subscriptions, each with its delivery state (pending, dead, lag)."""
        subs, states = await self.store.list(tenant_id), await self.store.states(tenant_id)
        return [{**sub, **states.get(sub["id"], {})} for sub in subs]

    async def get(self, tenant_id: str, sub_id: uuid.UUID) -> dict[str, Any]:
        row = await self.store.get(tenant_id, sub_id)
        if row is None:
            raise ApiError(404, "not_found", "no such webhook")
        return row

    async def update(
        self, tenant_id: str, sub_id: uuid.UUID, changes: dict[str, Any]
    ) -> dict[str, Any]:
        if "url" in changes:
            changes["url"] = await self._checked(changes["url"])
        if "types" in changes:
            changes["types"] = self._types(changes["types"])
        if not changes:
            return await self.get(tenant_id, sub_id)
        row = await self.store.update(tenant_id, sub_id, changes)
        if row is None:
            raise ApiError(404, "not_found", "no such webhook")
        return row

    async def delete(self, tenant_id: str, sub_id: uuid.UUID) -> None:
        if not await self.store.delete(tenant_id, sub_id):
            raise ApiError(404, "not_found", "no such webhook")

    async def deliveries(
        self, tenant_id: str, sub_id: uuid.UUID, status: str | None, limit: int
    ) -> list[dict[str, Any]]:
        await self.get(tenant_id, sub_id)
        return await self.store.deliveries(tenant_id, sub_id, status=status, limit=limit)

    async def replay(self, tenant_id: str, sub_id: uuid.UUID) -> int:
        """Dead deliveries back to pending (up to ``MAX_LOG`` a call)."""
        await self.get(tenant_id, sub_id)
        return await self.store.replay(tenant_id, sub_id, limit=MAX_LOG)
