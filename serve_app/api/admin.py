"""/v1/admin/keys: create, list and revoke API keys of the admin key's own tenant.

The secret is returned once, at creation; it is stored only as a SHA-256 hash
and never listed or logged. Revocation takes effect on the next request: each
Ingress replica caches authenticated keys, and a NOTIFY from the revoking
transaction evicts the key from every replica's cache.
"""

from __future__ import annotations

import logging
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response

from serve_app.api.deps import Caller, Svc
from serve_app.auth import Principal, check_key_owner
from serve_app.errors import ApiError
from serve_app.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyList, DeletedCount

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/admin", tags=["admin"])


async def admin(caller: Caller) -> Principal:
    if caller.role != "admin":
        raise ApiError(403, "forbidden", "an admin key is required")
    return caller


Admin = Annotated[Principal, Depends(admin)]


@router.post("/keys", status_code=201, response_model=ApiKeyCreated)
async def create_key(body: ApiKeyCreate, caller: Admin, services: Svc):
    check_key_owner(body.role, body.user_id)
    key, row = await services.keys.create(
        caller.tenant_id,
        body.role,
        user_id=body.user_id,
        name=body.name,
        rate_limit_per_s=body.rate_limit_per_s,
        created_by=caller.key_id,
    )
    log.info(
        "key %s (%s) created in tenant %s by %s",
        row["id"],
        body.role,
        caller.tenant_id,
        caller.key_id,
    )
    return {**row, "key": key}


@router.get("/keys", response_model=ApiKeyList)
async def list_keys(caller: Admin, services: Svc):
    return {"keys": await services.keys.list(caller.tenant_id)}


@router.get("/keys/{key_id}", response_model=ApiKeyInfo)
async def get_key(key_id: UUID, caller: Admin, services: Svc):
    for row in await services.keys.list(caller.tenant_id):
        if row["id"] == key_id:
            return row
    raise ApiError(404, "not_found", "key not found")


@router.delete("/keys/{key_id}", status_code=204)
async def revoke_key(key_id: UUID, caller: Admin, services: Svc):
    if not await services.keys.revoke(caller.tenant_id, key_id):
        raise ApiError(404, "not_found", "key not found or already revoked")
    log.info("key %s revoked in tenant %s by %s", key_id, caller.tenant_id, caller.key_id)
    return Response(status_code=204)


@router.delete("/data", response_model=DeletedCount)
async def erase_tenant(
    caller: Admin,
    services: Svc,
    confirm: Annotated[str, Query(description="the tenant id, to confirm the erasure")],
):
    """Erase the admin key's tenant: every memory (vectors, history), fact, turn and
    session; its API keys stay. ``confirm`` must repeat the tenant id."""
    if confirm != caller.tenant_id:
        raise ApiError(422, "invalid_request", "confirm must be the tenant id")
    removed = await services.lifecycle.forget.erase_tenant(caller.tenant_id)
    log.warning("tenant %s erased by key %s: %s", caller.tenant_id, caller.key_id, removed)
    return {"deleted": removed["memories"], "removed": removed}
