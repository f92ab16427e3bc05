"""Session turns (the short-term buffer) and what they trigger in extraction.

Appending is one transaction; every N user turns the session is handed to the
extractor, fire-and-forget (``ExtractionTrigger``). The buffer is the durable
queue: a lost trigger is made up for by the extractor's periodic scan. Without
an LLM each user turn is stored verbatim as an episodic memory by the extractor.
``infer: true`` memories travel the same road as one-turn sessions of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from serve_app.errors import ApiError
from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.schemas import MemoryFields
from serve_app.spend.meter import SpendMeter
from serve_app.store import Owner
from serve_app.store.turns import SessionKey, Speaker, TurnStore


class SessionService:
    def __init__(
        self,
        turns: TurnStore,
        trigger: ExtractionTrigger | None,
        *,
        turn_ttl_hours: float,
        spend: SpendMeter | None = None,
    ) -> None:
        self.spend = spend  # a spent background budget defers the session's extraction
        self.turns = turns
        self.trigger = trigger
        self.turn_ttl_hours = turn_ttl_hours

    @property
    def inference_enabled(self) -> bool:
        return self.trigger is not None and self.trigger.enabled

    def _state(self, fired: bool) -> str:
        """scheduled | buffered | raw (no LLM: turns are stored as episodic memories)."""
        if self.trigger is None:
            return "buffered"
        if not self.trigger.enabled:
            return "raw"
        return "scheduled" if fired else "buffered"

    async def record(
        self,
        owner: Owner,
        session_id: str,
        agent_id: str | None,
        messages: Sequence[tuple[str, str]],
        *,
        occurred_at: Sequence[datetime | None] | None = None,
        speakers: Sequence[Speaker] | None = None,
    ) -> tuple[list[int], str]:
        """Append turns and fire extraction when due; (turn range, extraction state).
        ``occurred_at``: when each message was said (None: now); ``speakers``: who said
        each (None: the owner and the assistant)."""
        if session_id.startswith(INFER_PREFIX):
            reserved = f"session ids starting with {INFER_PREFIX!r} are reserved"
            raise ApiError(422, "invalid_request", reserved)
        assert owner.user_id is not None
        key = SessionKey(owner.tenant_id, owner.user_id, session_id)
        appended = await self.turns.append(
            key,
            list(messages),
            agent_id=agent_id,
            ttl_hours=self.turn_ttl_hours,
            occurred_at=occurred_at,
            speakers=speakers,
        )
        fired = self.trigger is not None and self.trigger.due(appended.pending_user_turns)
        if fired:
            self.trigger.fire(key)
        return [appended.first_index, appended.last_index], self._state(fired)

    async def end(self, owner: Owner, session_id: str, agent_id: str | None) -> tuple[int, str]:
        """Mark the session ended and extract it in full; (pending turns, extraction state)."""
        assert owner.user_id is not None
        key = SessionKey(owner.tenant_id, owner.user_id, session_id)
        pending = await self.turns.end(key, agent_id)
        if self.trigger is not None:
            self.trigger.fire(key, force=True)
        return pending, self._state(True)

    async def status(self, owner: Owner, session_id: str) -> dict[str, Any]:
        """Where the session's turns stand in extraction (also the status of an infer job)."""
        assert owner.user_id is not None
        key = SessionKey(owner.tenant_id, owner.user_id, session_id)
        counts = await self.turns.status(key)
        if not counts.turns:
            raise ApiError(404, "not_found", "session not found")
        out = {
            "session_id": session_id,
            "turns": counts.turns,
            "pending_turns": counts.pending,
            "failed_turns": counts.failed,
            "compressed_turns": counts.compressed,
            "ended": await self.turns.is_ended(key),
        }
        if counts.pending and self.spend is not None and self.inference_enabled:
            over = await self.spend.deferred(owner.tenant_id, owner.user_id)
            if over is not None:  # what the extractor sees too: its turns wait, queued
                out["deferred"] = "budget"
                out["resumes_at"] = over.resumes_at
        return out

    async def queue_inference(
        self, owner: Owner, item: MemoryFields, *, fire: bool = True
    ) -> dict[str, Any]:
        """``infer: true``: the content becomes a one-turn extraction job (``infer-<hex>``).

        It survives LLM outages like any turn; its status is ``GET /v1/sessions/{job_id}``.
        Memories it yields carry the caller's session_id, agent_id, tags and metadata.
        """
        assert owner.user_id is not None
        job = f"{INFER_PREFIX}{uuid.uuid4().hex[:16]}"
        key = SessionKey(owner.tenant_id, owner.user_id, job)
        meta = {
            "session_id": item.session_id,
            "tags": item.tags or [],
            "metadata": item.metadata or {},
            "type_hint": item.type.value,
        }
        await self.turns.append(
            key,
            [("user", item.content)],
            agent_id=item.agent_id,
            ttl_hours=self.turn_ttl_hours,
            meta=meta,
        )
        await self.turns.end(key, item.agent_id)
        if self.trigger is not None and fire:
            self.trigger.fire(key, force=True)
        return {"status": "queued", "job_id": job}

    async def infer_now(
        self, owner: Owner, item: MemoryFields, wait_s: float
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``infer: true`` answered synchronously (mem0's add): the job, and the outcome
        of its extraction (with the event list) if it finished within ``wait_s``; else
        None and the job goes on in the background like any queued one."""
        job = await self.queue_inference(owner, item, fire=False)
        assert self.trigger is not None and owner.user_id is not None
        key = SessionKey(owner.tenant_id, owner.user_id, job["job_id"])
        return job, await self.trigger.run_now(key, wait_s)
