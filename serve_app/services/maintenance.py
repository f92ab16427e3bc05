"""Admin maintenance: dead letters, one user's consolidation, one user's profile classes.

Dead-lettered extraction batches are listed and put back in the queue (then
triggered, so they run at once); consolidation of one user runs here, in the
caller's replica, with the same job the extractor runs periodically (its LLM
parts only when an LLM is configured); so does applying today's profile rule to a
user's memories written before it changed (the writer's ``classify_again``).
"""

from __future__ import annotations

import uuid
from typing import Any

from serve_app.consolidation.job import Consolidator
from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.services.write_errors import write_errors
from serve_app.store import Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.turns import TurnStore


class MaintenanceService:
    def __init__(
        self,
        turns: TurnStore,
        trigger: ExtractionTrigger | None,
        consolidator: Consolidator,
        writer: GuardedWriter,
        classify_max: int,
    ) -> None:
        self.turns = turns
        self.trigger = trigger
        self.consolidator = consolidator
        self.writer = writer
        self.classify_max = classify_max

    async def dead_letters(
        self, tenant_id: str, user_id: str | None, limit: int
    ) -> list[dict[str, Any]]:
        return await self.turns.dead_letters(tenant_id, user_id, limit)

    async def retry(
        self, tenant_id: str, user_id: str | None, session_id: str | None
    ) -> list[dict[str, str]]:
        keys = await self.turns.retry_dead(tenant_id, user_id, session_id)
        for key in keys:
            if self.trigger is not None:
                self.trigger.fire(key, force=True)
        return [{"user_id": k.user_id, "session_id": k.session_id} for k in keys]

    async def consolidate(self, tenant_id: str, user_id: str) -> dict[str, Any]:
        return await self.consolidator.run(Owner(tenant_id, user_id))

    async def classify_profile(
        self, tenant_id: str, user_id: str, after: uuid.UUID | None
    ) -> dict[str, Any]:
        """Today's profile rule on one user's unclassified memories, ``classify_max`` at
        most per call; the answer's ``next`` continues where this one stopped."""
        with write_errors():  # 409 while a forget of the user runs
            run = await self.writer.classify_again(
                Owner(tenant_id, user_id), after, self.classify_max
            )
        return {
            "user_id": user_id,
            "examined": run.examined,
            "classified": run.classified,
            "next": run.next,
        }
