"""``GET /v1/admin/usage``: what the tenant's LLM calls spent.

Admin keys only, their own tenant only. Sums of the daily roll-up
(serve_app/store/llm_spend.py) grouped by any of day, end user, purpose and model,
over a date range (UTC days, inclusive), one page at a time, with the top end users
of the range. Calls still in flight are not in it (they are counted when they end).
"""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.responses import LlmUsageReport
from serve_app.schemas import Identifier

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/usage", response_model=LlmUsageReport)
async def llm_usage(
    caller: Admin,
    services: Svc,
    group_by: Annotated[str, Query(max_length=64, description="day,user,purpose,model")] = "day",
    since: Annotated[date | None, Query(description="first UTC day (default: to - 29)")] = None,
    until: Annotated[date | None, Query(description="last UTC day (default: today)")] = None,
    user_id: Annotated[Identifier | None, Query(description="one end user's rows")] = None,
    top_users: Annotated[int, Query(ge=0, le=100)] = 10,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
):
    """LLM tokens and calls of the admin key's tenant: per group, and its top end users."""
    return await services.llm_usage.report(
        caller.tenant_id,
        group_by,
        since,
        until,
        user_id=user_id,
        top_users=top_users,
        limit=limit,
        offset=offset,
    )
