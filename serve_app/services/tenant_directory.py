"""Use cases that read across one tenant's owners: who owns a memory named by id, which
entities exist, a numbered page of a list with its count.

The mem0 compatibility routes need them because the mem0 client names no user on by-id
calls: a service key then finds the owner within its tenant, never beyond it, and a
user key only ever finds its own memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.store.directory import MemoryDirectory
from serve_app.store.records import Owner


class TenantDirectory:
    def __init__(self, directory: MemoryDirectory, entities_listed: int) -> None:
        self.store = directory
        self.pool = directory.pool
        self.entities_listed = entities_listed

    async def owners_of(
        self, caller: Principal, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, Owner]:
        """Owners of memories named by id: a service key finds them within its tenant;
        anything not the caller's is a 404."""
        found = await self.store.owners(caller.tenant_id, ids)
        out: dict[uuid.UUID, Owner] = {}
        for memory_id in ids:
            user = found.get(memory_id, "")
            if memory_id not in found or (caller.role == "user" and user != caller.user_id):
                raise ApiError(404, "not_found", f"memory {memory_id} not found")
            out[memory_id] = Owner(caller.tenant_id, found[memory_id])
        return out

    async def owner_of(self, caller: Principal, memory_id: uuid.UUID) -> Owner:
        """One memory's owner: a user key's memories are its own and the by-id call that
        follows checks that (a 404 otherwise), so only a service key pays the lookup."""
        if caller.role == "user":
            return resolve_owner(caller, None)
        return (await self.owners_of(caller, [memory_id]))[memory_id]

    async def numbered_page(
        self, owner: Owner, number: int, size: int, narrow: dict[str, str | None]
    ) -> tuple[list[dict[str, Any]], int]:
        """Page ``number`` (from 1) of ``size`` of the owner's memories, newest first, and
        the list's count, in one statement whatever the page; ``narrow``: ``agent_id``
        and/or ``session_id``."""
        return await self.store.page(owner, offset=(number - 1) * size, limit=size, **narrow)

    async def entities(self, caller: Principal) -> list[dict[str, Any]]:
        """The tenant's users, agents and runs (a user key: its own user and its agents
        and runs), at most ``entities_listed`` of each kind, with each kind's total."""
        mine = caller.user_id if caller.role == "user" else None
        return await self.store.entities(caller.tenant_id, mine, self.entities_listed)

    async def users_with(self, caller: Principal, kind: str, name: str) -> list[str]:
        """The users of the caller's tenant with memories of agent or run ``name``; a user
        key: only itself."""
        if caller.role == "user":
            return [caller.user_id] if caller.user_id else []
        return await self.store.users_with(caller.tenant_id, kind, name)
