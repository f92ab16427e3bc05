"""mem0's ping and entity routes: who the key is, which users/agents/runs have memories,
and deleting all memories of one of them."""

from __future__ import annotations

from fastapi import APIRouter

from serve_app.api.deps import Caller, Svc
from serve_app.api.mem0 import shapes as m
from serve_app.api.mem0.scope import Scope, bad
from serve_app.errors import ApiError
from serve_app.services.memories import SHARED_WRITERS
from serve_app.store import Owner

router = APIRouter(tags=["mem0"])
COLUMN = {"agent": "agent_id", "run": "session_id"}


@router.get("/v1/ping/", response_model=m.Ping)
async def ping(caller: Caller):
    """The client's key check at construction; the tenant is its org and project."""
    return {
        "status": "ok",
        "org_id": caller.tenant_id,
        "project_id": caller.tenant_id,
        "role": caller.role,
        "user_id": caller.user_id,
    }


@router.get("/v1/entities/", response_model=m.EntityList)
async def entities(caller: Caller, services: Svc):
    """A user key sees only its own user (and its agents and runs). At most
    ``MEMSERVE_MAX_ENTITIES_LISTED`` of each kind are listed (first by name); the
    ``total_*`` counts are the full ones."""
    rows = await services.directory.entities(caller)
    results = [
        {
            **{k: v for k, v in r.items() if k != "kind_total"},
            "id": r["name"],
            "owner": caller.tenant_id,
        }
        for r in rows
    ]
    total = dict.fromkeys(("user", "agent", "run"), 0)
    for r in rows:
        total[r["type"]] = int(r["kind_total"])
    return {
        "count": sum(total.values()),
        "results": results,
        "total_users": total["user"],
        "total_agents": total["agent"],
        "total_runs": total["run"],
    }


@router.delete("/v2/entities/{entity_type}/{entity_id}/", response_model=m.Deleted)
async def delete_entity(entity_type: str, entity_id: str, caller: Caller, services: Svc):
    """Forget a user, or an agent/run (for a user key: its own ones), as
    ``DELETE /v1/memories`` does; an agent's shared memories of the caller's tenant go too
    (service and admin keys). An entity with nothing kept, or another user, is a 404."""
    if entity_type not in ("user", "agent", "run"):
        raise bad("entity_type is user, agent or run")
    Scope().set_entity("user_id", entity_id)  # validates the id
    tenant = caller.tenant_id
    if entity_type == "user":
        if caller.role == "user" and entity_id != caller.user_id:
            raise ApiError(404, "not_found", "entity not found")
        users = [entity_id]
    else:
        users = await services.directory.users_with(caller, entity_type, entity_id)
    narrow = {"agent_id": None, "session_id": None}
    if entity_type != "user":
        narrow[COLUMN[entity_type]] = entity_id
    deleted = removed = 0
    for user in users:  # forget: memories, facts, turns and session state of each
        counts = await services.lifecycle.forget.forget(Owner(tenant, user), **narrow)
        deleted += counts.get("memories", 0)
        removed += sum(counts.values())
    if entity_type == "agent" and caller.role in SHARED_WRITERS:  # its shared memories too
        shared = await services.memories.delete_scope(
            Owner(tenant, None), agent_id=entity_id, session_id=None, actor=caller.actor
        )
        deleted += shared
        removed += shared
    if not removed:
        raise ApiError(404, "not_found", "entity not found")
    return {"message": "Entity deleted successfully.", "deleted": deleted}
