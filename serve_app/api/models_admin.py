"""/v1/admin/models: the embedding models' vector tables, and dropping a retired one.

Tables are shared by every tenant, so only an admin key of the default tenant (the
operator's) may see or drop them. A model change re-embeds in the background
(serve_app/reembed); after the switch the old table is ``retired`` and kept until
this call drops it.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.errors import ApiError
from serve_app.responses import ModelDropped, ModelList
from serve_app.store.model_registry import DropRefused, drop_retired, models

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/admin/models", tags=["admin"])


def _operator(caller: Admin, services: Svc) -> None:
    if caller.tenant_id != services.settings.default_tenant:
        raise ApiError(403, "forbidden", "embedding models are managed by the default tenant")


@router.get("", response_model=ModelList)
async def list_models(caller: Admin, services: Svc) -> dict:
    """Every vector table: state (active, filling, retired) and re-embed progress."""
    _operator(caller, services)
    async with services.health.pool.connection() as conn:
        rows = await models(conn)
    return {"models": [r.as_dict() for r in rows]}


@router.delete("/{slug}", response_model=ModelDropped)
async def drop_model(slug: str, caller: Admin, services: Svc) -> dict:
    """Drop a retired model's vector table (409 while it serves, fills or a switch settles)."""
    _operator(caller, services)
    try:
        async with services.health.pool.connection() as conn:
            row = await drop_retired(conn, slug)
    except LookupError as exc:
        raise ApiError(404, "not_found", "no such embedding model table") from exc
    except DropRefused as exc:
        raise ApiError(409, "conflict", str(exc)) from exc
    log.info("vector table of %s dropped by key %s", row.name, caller.key_id)
    return {"dropped": row.as_dict()}
