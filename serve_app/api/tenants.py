"""/v1/admin/tenant/settings: the admin key's own tenant's settings, and their history.

GET shows the overrides the tenant set, its version, and the effective document
(the environment's defaults with the overrides on top). PUT replaces the overrides;
PATCH is a JSON merge patch of them (null: back to the environment's value). Both
validate strictly (422 naming the field), take an optional ``If-Match: "<version>"``
(409 when the settings moved on; ``"0"``: a tenant that never set anything), record who
changed what in the history, and reach every replica at once (NOTIFY).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.api.memories import parse_if_match
from serve_app.responses import SettingsHistory, TenantSettingsView
from serve_app.schemas import MAX_ROW_VERSION
from serve_app.tenancy import TenantSettings

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/admin/tenant", tags=["admin"])
IfMatch = Annotated[str | None, Header(description='the settings version: "3"')]


@router.get("/settings", response_model=TenantSettingsView)
async def get_settings(caller: Admin, services: Svc):
    return await services.tenants.read(caller.tenant_id)


@router.put("/settings", response_model=TenantSettingsView)
async def put_settings(
    caller: Admin, services: Svc, body: Annotated[TenantSettings, Body()], if_match: IfMatch = None
):
    """Replace the tenant's overrides with ``body`` (what it leaves out: the environment's)."""
    doc = body.model_dump(exclude_none=True)
    return await _change(caller, services, "replaced", doc, if_match)


@router.patch("/settings", response_model=TenantSettingsView)
async def patch_settings(
    caller: Admin, services: Svc, body: Annotated[dict[str, Any], Body()], if_match: IfMatch = None
):
    """A JSON merge patch (RFC 7386) of the overrides: ``{"quotas": {"max_memories_per_user":
    100}}`` sets one value, ``null`` returns a value (or a group) to the environment's."""
    return await _change(caller, services, "patched", body, if_match)


def settings_version(if_match: str | None) -> int | None:
    """The version a change is conditional on. A tenant that never set anything is at
    version 0 (GET says so), so ``If-Match: "0"`` means "only if still unconfigured"
    (the console sends the version it showed); other versions parse like a memory's."""
    if if_match is not None and if_match.strip().removeprefix("W/").strip('"') == "0":
        return 0
    return parse_if_match(if_match, None)


async def _change(
    caller: Admin, services: Svc, how: str, doc: dict[str, Any], if_match: str | None
) -> dict[str, Any]:
    apply = services.tenants.replace if how == "replaced" else services.tenants.patch
    out = await apply(caller.tenant_id, doc, caller, settings_version(if_match))
    log.info(
        "tenant %s settings %s by %s (v%d)", caller.tenant_id, how, caller.key_id, out["version"]
    )
    return out


@router.get("/settings/history", response_model=SettingsHistory)
async def settings_history(
    caller: Admin,
    services: Svc,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ROW_VERSION, description="versions older than this")
    ] = None,
):
    """Every change, newest first: who (the admin key, or ``cli``), when, and each field's
    old and new value."""
    rows = await services.tenants.history(caller.tenant_id, limit=limit, before_version=before)
    return {"changes": rows}
