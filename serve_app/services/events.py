"""The event feed (``GET /v1/events``): who may read which events, and paging.

A service or admin key reads its tenant's events (optionally one user's); a user key
only its own user's. Rows come from :class:`serve_app.store.events.EventStore`, which
keeps the order resumable (see there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.store.events import EVENT_TYPES, Cursor, EventStore

MAX_PAGE = 500  # events per page at most


class EventFeed:
    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def page(
        self,
        principal: Principal,
        *,
        after: str | None,
        types: Sequence[str] = (),
        user_id: str | None = None,
        limit: int = 100,
        include_content: bool = False,
        newest: bool = False,
    ) -> dict[str, Any]:
        """One page after ``after`` (None: from the oldest kept), oldest first; ``newest``:
        before ``after`` (None: from the newest), newest first."""
        try:
            cursor = Cursor.parse(after)
        except ValueError as exc:
            raise ApiError(422, "invalid_request", str(exc)) from None
        unknown = sorted(set(types) - set(EVENT_TYPES))
        if unknown:
            raise ApiError(422, "invalid_request", f"unknown event types: {', '.join(unknown)}")
        if not 1 <= limit <= MAX_PAGE:
            raise ApiError(422, "invalid_request", f"limit must be 1..{MAX_PAGE}")
        if principal.role == "user" or user_id is not None:
            user_id = resolve_owner(principal, user_id).user_id  # a user key: itself only
        rows = await self.store.page(
            principal.tenant_id,
            cursor,
            limit=limit,
            user_id=user_id,
            types=list(types),
            include_content=include_content,
            newest=newest,
        )
        out = []
        for row in rows:
            position = Cursor(row.pop("txid"), row.pop("id"))
            out.append({**row, "id": row.pop("event_id"), "cursor": position.token()})
            cursor = position
        return {"events": out, "next_cursor": cursor.token()}
