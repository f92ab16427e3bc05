"""/v1/users: the tenant's users and their sessions, for the console and operators.

A user key sees only its own user; a service or admin key its tenant's (the tenant
comes from the key, never from the request).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from serve_app.api.deps import Caller, Svc, page_limit
from serve_app.auth import resolve_owner
from serve_app.responses import SessionList, UserList
from serve_app.schemas import Identifier, ProfileResponse

router = APIRouter(prefix="/v1/users", tags=["users"])
UserPath = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@\-]+$")]


@router.get("", response_model=UserList)
async def list_users(
    caller: Caller,
    services: Svc,
    limit: Annotated[int, Query(ge=1)] = 50,
    cursor: Identifier | None = None,
):
    """Users by id, with memory/fact/session counts and their last activity."""
    only = caller.user_id if caller.role == "user" else None
    rows, next_cursor = await services.users.users(
        caller.tenant_id, only=only, after=cursor or "", limit=page_limit(limit, services)
    )
    return {"users": rows, "next_cursor": next_cursor}


@router.get("/{user_id}/sessions", response_model=SessionList)
async def list_sessions(
    user_id: UserPath, caller: Caller, services: Svc, limit: Annotated[int, Query(ge=1)] = 50
):
    """The user's sessions, latest first, with pending / extracted / dead-lettered turns."""
    owner = resolve_owner(caller, user_id)
    assert owner.user_id is not None
    rows = await services.users.sessions(
        owner.tenant_id, owner.user_id, page_limit(limit, services)
    )
    return {"sessions": rows}


@router.get("/{user_id}/profile", response_model=ProfileResponse)
async def user_profile(
    user_id: UserPath, caller: Caller, services: Svc, agent_id: Identifier | None = None
):
    """The user's profile: standing instructions, constraints and identity,
    from memories (classified when written, or pinned) and facts, most important first,
    each with why it is there; every context block of the user starts with it."""
    owner = resolve_owner(caller, user_id)
    assert owner.user_id is not None
    memories, facts = await services.context.profile(owner, agent_id)
    return {"user_id": owner.user_id, "memories": memories, "facts": facts}
