"""Extractor deployment: the worker replica, off every request path.

A thin Ray wrapper around :class:`serve_app.worker.Worker`, built by
``serve_app.composition.build_worker``: LLM extraction of session turns, periodic
consolidation, the re-embed worker of a model change, document jobs, LLM spend upkeep
and webhook delivery. ``process`` only schedules work and returns at once (the Ingress
fires it and forgets); the work runs in background tasks of the replica, bounded by
``MEMSERVE_EXTRACT_CONCURRENCY``, and the durable queue (session turns with
``extracted_at IS NULL``) is re-scanned every ``MEMSERVE_EXTRACT_SCAN_INTERVAL_S``.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from serve_app.composition import build_worker
from serve_app.db.resolve import resolve_dsn
from serve_app.model_facts import ModelFacts
from serve_app.settings import get_settings
from serve_app.store.turns import SessionKey

log = logging.getLogger("ray.serve")


@serve.deployment(max_ongoing_requests=1000)
class Extractor:
    async def __init__(self, model: ModelFacts, embedder: DeploymentHandle) -> None:
        settings = get_settings()
        dsn = resolve_dsn(settings)  # launcher's DSN, else the embedded server (`serve run`)
        self.worker = await build_worker(settings, model, dsn, embedder.embed_many.remote)
        llm = settings.llm
        log.info(
            "extractor ready: %s",
            f"LLM {llm.model} at {llm.base_url}" if self.worker.llm else "disabled (no LLM)",
        )

    async def process(self, tenant_id: str, user_id: str, session_id: str, force: bool = False):
        """Schedule extraction of the session's pending turns; returns at once."""
        self.worker.submit(SessionKey(tenant_id, user_id, session_id), force)
        return "accepted"

    async def process_now(
        self, tenant_id: str, user_id: str, session_id: str, force: bool = False
    ) -> dict[str, Any]:
        """Run (or join) the session's extraction and return its outcome (mem0's
        synchronous add, tools)."""
        outcome = await self.worker.submit(SessionKey(tenant_id, user_id, session_id), force)
        return outcome.as_dict() if outcome else {}

    async def scan_now(self) -> int:
        """Re-scan the durable queue now and wait for the work (tests, operators)."""
        return await self.worker.scan_now()

    async def status(self) -> dict[str, Any]:
        return self.worker.status()

    async def spend_upkeep_now(self) -> int:
        """Close stale LLM-call intents and prune now (tests, operators); how many closed."""
        return await self.worker.spend.maintain()

    async def __del__(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            await worker.aclose()
