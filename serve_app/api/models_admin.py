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
from serve_app.responses import ModelDropped, ModelList

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/admin/models", tags=["admin"])


@router.get("", response_model=ModelList)
async def list_models(caller: Admin, services: Svc) -> dict:
    """Every vector table: state (active, filling, retired) and re-embed progress."""
    return {"models": await services.embedding_models.list(caller)}


@router.delete("/{slug}", response_model=ModelDropped)
async def drop_model(slug: str, caller: Admin, services: Svc) -> dict:
    """Drop a retired model's vector table (409 while it serves, fills or a switch settles)."""
    return {"dropped": await services.embedding_models.drop(caller, slug)}
