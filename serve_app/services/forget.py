"""Forget (GDPR art. 17 erasure) of a user, one agent or session of theirs, or a tenant.

Removes memories, their vectors and history, the user's facts, pending and
extracted turns and session state, in chunks short enough for the statement
timeout (:mod:`serve_app.store.forget`). Extraction work in flight for the owner
writes nothing afterwards (:mod:`serve_app.store.erasure`). Caches: every chunk
and a final statement bump the owners' versions, so from the moment the call
returns every retriever replica's version check refuses the old entry, and the
NOTIFY of the same commit drops it from each replica's memory. Crash-safe: a forget
that fails or is cut finishes its erasure (or its lease runs out), so it blocks nothing
afterwards; calling it again deletes what is left (see docs/operations.md, "What
forget guarantees under faults").
"""

from __future__ import annotations

import logging

from serve_app.errors import ApiError
from serve_app.store import Owner
from serve_app.store.forget import ForgetStore, Scope

log = logging.getLogger(__name__)


class ForgetService:
    def __init__(self, store: ForgetStore) -> None:
        self.store = store

    async def forget(
        self, owner: Owner, *, agent_id: str | None = None, session_id: str | None = None
    ) -> dict[str, int]:
        """Everything kept about the user (or one agent/session of theirs); counts per kind."""
        if owner.user_id is None:
            raise ApiError(422, "invalid_request", "a forget names a user (user_id)")
        counts = await self.store.forget(
            Scope(owner.tenant_id, owner.user_id, agent_id, session_id)
        )
        log.info(
            "forgot user %s of tenant %s (agent %s, session %s): %s",
            owner.user_id,
            owner.tenant_id,
            agent_id,
            session_id,
            counts,
        )
        return counts

    async def erase_tenant(self, tenant_id: str) -> dict[str, int]:
        """Every memory, fact, turn and session of the tenant (its API keys stay)."""
        counts = await self.store.forget(Scope(tenant_id, None))
        log.info("erased tenant %s: %s", tenant_id, counts)
        return counts
