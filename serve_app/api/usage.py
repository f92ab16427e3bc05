"""``GET /v1/admin/usage``: what the tenant's LLM calls spent (issue 31).

Admin keys only, their own tenant only. Sums of the daily roll-up
(serve_app/store/llm_spend.py) grouped by any of day, end user, purpose and model,
over a date range (UTC days, inclusive), one page at a time, with the top end users
of the range. Calls still in flight are not in it (they are counted when they end).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from serve_app.api.admin import Admin
from serve_app.api.deps import Svc
from serve_app.errors import ApiError
from serve_app.responses import LlmUsageReport
from serve_app.schemas import Identifier
from serve_app.store.llm_spend import GROUP_BY

router = APIRouter(prefix="/v1/admin", tags=["admin"])
MAX_DAYS = 400


def _group_by(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUP_BY]
    if unknown or len(set(names)) != len(names):
        allowed = ", ".join(GROUP_BY)
        raise ApiError(422, "invalid_request", f"group_by is a comma-separated subset of {allowed}")
    return names


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
    spend = services.spend
    if spend is None or spend.store is None:
        raise ApiError(503, "unavailable", "LLM metering is not configured")
    names = _group_by(group_by)
    until = until or datetime.now(UTC).date()
    since = since or until - timedelta(days=min(29, (until - date.min).days))
    if since > until or (until - since).days >= MAX_DAYS:
        message = f"since must be on or before until, at most {MAX_DAYS} days apart"
        raise ApiError(422, "invalid_request", message)
    limit = min(limit, services.settings.spend.report_max_rows)
    rows = await spend.store.report(
        caller.tenant_id, names, since, until, user_id=user_id, limit=limit + 1, offset=offset
    )
    top = []
    if top_users:
        top = await spend.store.top_users(caller.tenant_id, since, until, top_users)
    return {
        "tenant_id": caller.tenant_id,
        "since": since.isoformat(),
        "until": until.isoformat(),
        "group_by": names,
        "rows": rows[:limit],
        "top_users": top,
        "next_offset": offset + limit if len(rows) > limit else None,
    }
