"""What a tenant's LLM calls spent, as its admins read it: tokens and calls per group
(any of day, end user, purpose and model) over a window of UTC days, and its top end
users (serve_app/store/llm_spend.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from serve_app.errors import ApiError
from serve_app.settings import SpendSettings
from serve_app.store.llm_spend import GROUP_BY, SpendStore

MAX_DAYS = 400


def group_by(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in GROUP_BY]
    if unknown or len(set(names)) != len(names):
        allowed = ", ".join(GROUP_BY)
        raise ApiError(422, "invalid_request", f"group_by is a comma-separated subset of {allowed}")
    return names


class LlmUsageService:
    def __init__(self, store: SpendStore, s: SpendSettings) -> None:
        self.store = store
        self.s = s

    async def report(
        self,
        tenant_id: str,
        grouping: str,
        since: date | None,
        until: date | None,
        *,
        user_id: str | None,
        top_users: int,
        limit: int,
        offset: int,
    ) -> dict[str, Any]:
        """The report of ``since``..``until`` (default: the last 30 days to today), at most
        ``MEMSERVE_SPEND_REPORT_MAX_ROWS`` rows a page."""
        names = group_by(grouping)
        until = until or datetime.now(UTC).date()
        since = since or until - timedelta(days=min(29, (until - date.min).days))
        if since > until or (until - since).days >= MAX_DAYS:
            message = f"since must be on or before until, at most {MAX_DAYS} days apart"
            raise ApiError(422, "invalid_request", message)
        limit = min(limit, self.s.report_max_rows)
        rows = await self.store.report(
            tenant_id, names, since, until, user_id=user_id, limit=limit + 1, offset=offset
        )
        top = await self.store.top_users(tenant_id, since, until, top_users) if top_users else []
        return {
            "tenant_id": tenant_id,
            "since": since.isoformat(),
            "until": until.isoformat(),
            "group_by": names,
            "rows": rows[:limit],
            "top_users": top,
            "next_offset": offset + limit if len(rows) > limit else None,
        }
