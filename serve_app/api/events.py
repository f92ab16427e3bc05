"""/v1/events: the tenant's (or a user's) change feed, resumable from a cursor."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from serve_app.api.deps import Caller, Svc
from serve_app.responses import EventPage
from serve_app.schemas import Identifier
from serve_app.services.events import MAX_PAGE

router = APIRouter(prefix="/v1/events", tags=["events"])


@router.get("", response_model=EventPage)
async def list_events(
    caller: Caller,
    services: Svc,
    after: Annotated[str | None, Query(max_length=41, description="next_cursor of a page")] = None,
    types: Annotated[str | None, Query(max_length=400, description="comma-separated")] = None,
    user_id: Annotated[Identifier | None, Query(description="one user's events")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    include_content: bool = False,
    order: Annotated[Literal["asc", "desc"], Query(description="desc: newest first")] = "asc",
):
    """Events after ``after``, oldest first: a service or admin key reads its tenant's
    (``user_id``: one user's), a user key its own user's. Content only on request.
    ``order=desc``: the events before ``after`` (none: the newest), newest first."""
    wanted = [t.strip() for t in types.split(",") if t.strip()] if types else []
    return await services.events.page(
        caller,
        after=after,
        types=wanted,
        user_id=user_id,
        limit=limit,
        include_content=include_content,
        newest=order == "desc",
    )
