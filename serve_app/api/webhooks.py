"""/v1/admin/webhooks: the admin key's tenant's webhook subscriptions, their delivery log
and the replay of dead deliveries (delivery itself: serve_app/webhooks, Extractor tier)."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Response
from pydantic import Field

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.responses import (
    Webhook,
    WebhookCreated,
    WebhookDeliveries,
    WebhookList,
    WebhookReplayed,
)
from serve_app.schemas import StrictModel
from serve_app.services.webhooks import MAX_LOG

router = APIRouter(prefix="/v1/admin/webhooks", tags=["admin"])
Url = Annotated[str, Field(min_length=8, max_length=2000, pattern=r"^https?://[^\s]+$")]
Types = Annotated[list[Annotated[str, Field(max_length=40)]], Field(max_length=20)]


class WebhookCreate(StrictModel):
    url: Url
    types: Types = []  # empty: every event type
    include_content: bool = False  # the memory's or fact's text in each event
    enabled: bool = True


class WebhookPatch(StrictModel):
    url: Url | None = None
    types: Types | None = None
    include_content: bool | None = None
    enabled: bool | None = None


@router.post("", status_code=201, response_model=WebhookCreated)
async def create_webhook(body: WebhookCreate, caller: Admin, services: Svc):
    """A subscription to events from now on; the answer shows its signing secret once."""
    return await services.webhooks.create(
        caller.tenant_id, body.url, body.types, body.include_content, body.enabled
    )


@router.get("", response_model=WebhookList)
async def list_webhooks(caller: Admin, services: Svc):
    return {"webhooks": await services.webhooks.list(caller.tenant_id)}


@router.get("/{webhook_id}", response_model=Webhook)
async def get_webhook(webhook_id: UUID, caller: Admin, services: Svc):
    return await services.webhooks.get(caller.tenant_id, webhook_id)


@router.patch("/{webhook_id}", response_model=Webhook)
async def update_webhook(webhook_id: UUID, body: WebhookPatch, caller: Admin, services: Svc):
    changes = body.model_dump(exclude_none=True)
    return await services.webhooks.update(caller.tenant_id, webhook_id, changes)


@router.delete("/{webhook_id}", status_code=204)
async def delete_webhook(webhook_id: UUID, caller: Admin, services: Svc):
    await services.webhooks.delete(caller.tenant_id, webhook_id)
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=WebhookDeliveries)
async def webhook_deliveries(
    webhook_id: UUID,
    caller: Admin,
    services: Svc,
    status: Literal["pending", "delivered", "dead"] | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LOG)] = 100,
):
    """The delivery log, newest first (``status``: one state only)."""
    rows = await services.webhooks.deliveries(caller.tenant_id, webhook_id, status, limit)
    return {"deliveries": rows}


@router.post("/{webhook_id}/replay", response_model=WebhookReplayed)
async def replay_webhook(webhook_id: UUID, caller: Admin, services: Svc):
    """Send the dead deliveries again (attempts reset), in their order per owner."""
    return {"replayed": await services.webhooks.replay(caller.tenant_id, webhook_id)}
