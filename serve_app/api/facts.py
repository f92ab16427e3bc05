"""GET /v1/facts: the user's structured facts (deterministic lookup), optionally with history."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import BaseModel

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.schemas import Identifier

router = APIRouter(prefix="/v1/facts", tags=["facts"])


class Fact(BaseModel):
    id: UUID
    category: str
    key: str
    value: str
    confidence: float
    active: bool
    source: str
    session_id: str | None
    created_at: datetime
    updated_at: datetime
    superseded_at: datetime | None = None
    superseded_by: UUID | None = None


class FactList(BaseModel):
    facts: list[Fact]


@router.get("", response_model=FactList)
async def list_facts(
    caller: Caller,
    services: Svc,
    user_id: Annotated[Identifier | None, Query(description="required with a service key")] = None,
    include_inactive: bool = False,
    category: Annotated[str | None, Query(max_length=32)] = None,
):
    """Active facts; ``include_inactive=true`` adds replaced values (oldest first per key)."""
    owner = resolve_owner(caller, user_id)
    rows = await services.facts.list(owner, include_inactive=include_inactive, category=category)
    return {"facts": rows}
