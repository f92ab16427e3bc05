"""/v1/admin/extraction, /v1/admin/consolidate and /v1/admin/profile/classify: dead
letters, consolidation, and today's profile rule on memories written before it.

Admin keys only, always within the key's own tenant.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.responses import ConsolidationReport, DeadLetterList, ProfileClassified, Retried

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class RetryRequest(BaseModel):
    user_id: str | None = Field(default=None, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)


class ConsolidateRequest(BaseModel):
    user_id: str = Field(min_length=1, max_length=256)


class ClassifyRequest(BaseModel):
    user_id: str = Field(min_length=1, max_length=256)
    after: uuid.UUID | None = None  # the ``next`` of the call before


@router.get("/extraction/dead-letters", response_model=DeadLetterList)
async def list_dead_letters(
    caller: Admin,
    services: Svc,
    user_id: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Extraction batches that failed too often (kept until retried)."""
    rows = await services.maintenance.dead_letters(caller.tenant_id, user_id, limit)
    return {"dead_letters": rows}


@router.post("/extraction/dead-letters/retry", response_model=Retried)
async def retry_dead_letters(body: RetryRequest, caller: Admin, services: Svc) -> dict[str, Any]:
    """Queue dead-lettered batches again with fresh attempts (all, one user, one session)."""
    sessions = await services.maintenance.retry(caller.tenant_id, body.user_id, body.session_id)
    return {"retried": sessions}


@router.post("/consolidate", response_model=ConsolidationReport)
async def consolidate_user(body: ConsolidateRequest, caller: Admin, services: Svc) -> dict:
    """Run consolidation (merge, insights, digests, decay) for one user now."""
    return await services.maintenance.consolidate(caller.tenant_id, body.user_id)


@router.post("/profile/classify", response_model=ProfileClassified)
async def classify_profile(body: ClassifyRequest, caller: Admin, services: Svc) -> dict:
    """Apply today's profile rule to one user's memories that have no class and no pin
    (written before the rule or its bar changed); only adds classes. Bounded per call
    (``MEMSERVE_CONTEXT_PROFILE_CLASSIFY_MAX``): call again with ``after`` = ``next``
    until ``next`` is null."""
    return await services.maintenance.classify_profile(caller.tenant_id, body.user_id, body.after)
