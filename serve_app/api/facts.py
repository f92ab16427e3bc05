"""/v1/facts: the user's structured facts (deterministic lookup), optionally with history;
an explicit correction (PUT) and deletion (DELETE)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field, field_validator

from serve_app.api.deps import Caller, Svc, page_limit
from serve_app.auth import resolve_owner
from serve_app.responses import Fact, FactList
from serve_app.schemas import NO_NUL, DeletedCount, Identifier, StrictModel, event_time

router = APIRouter(prefix="/v1/facts", tags=["facts"])


class FactSet(StrictModel):
    user_id: Identifier | None = None
    category: str = Field(min_length=1, max_length=32, pattern=NO_NUL)
    key: str = Field(min_length=1, max_length=128, pattern=NO_NUL)
    value: str = Field(min_length=1, max_length=2000, pattern=NO_NUL)
    valid_from: datetime | None = None  # when it became true (default: now)

    _valid_from = field_validator("valid_from")(event_time)


UserQuery = Annotated[Identifier | None, Query(description="required with a service key")]


@router.get("", response_model=FactList)
async def list_facts(
    caller: Caller,
    services: Svc,
    user_id: Annotated[Identifier | None, Query(description="required with a service key")] = None,
    include_inactive: bool = False,
    category: Annotated[str | None, Query(max_length=32, pattern=NO_NUL)] = None,
    as_of: Annotated[datetime | None, Query(description="the values valid then")] = None,
    limit: Annotated[int, Query(ge=1)] = 200,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
):
    """Active facts by category and key, a page at a time (``next_cursor``);
    ``include_inactive=true`` adds replaced values (oldest first per key); ``as_of``: the
    values valid at that time."""
    owner = resolve_owner(caller, user_id)
    page_limit(limit, services)
    rows, next_cursor = await services.facts.list(
        owner,
        include_inactive=include_inactive,
        category=category,
        as_of=event_time(as_of),
        limit=limit,
        cursor=cursor,
    )
    return {"facts": rows, "next_cursor": next_cursor}


@router.put("", response_model=Fact)
async def set_fact(body: FactSet, caller: Caller, services: Svc):
    """Set (correct) a fact explicitly: it wins over any extracted value, whatever its
    confidence; the previous value stays in the history (``include_inactive``)."""
    owner = resolve_owner(caller, body.user_id)
    return await services.facts.set(owner, body.category, body.key, body.value, body.valid_from)


@router.delete("", response_model=DeletedCount)
async def delete_facts(
    caller: Caller,
    services: Svc,
    user_id: UserQuery = None,
    category: Annotated[str | None, Query(max_length=32, pattern=NO_NUL)] = None,
    key: Annotated[str | None, Query(max_length=128, pattern=NO_NUL)] = None,
):
    """Delete the user's facts (every version): all, one category, or one category/key."""
    owner = resolve_owner(caller, user_id)
    return {"deleted": await services.facts.delete(owner, category, key)}
