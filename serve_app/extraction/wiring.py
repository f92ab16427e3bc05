"""How the ingress plugs extraction in: its ``AppState.extras`` and readiness probe."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.settings import Settings


def extraction_extras(settings: Settings, extractor: Any | None) -> dict[str, Any]:
    """``extraction`` (fire-and-forget trigger) and ``turn_recorder`` (for the chat proxy)."""
    from serve_app.api.sessions import record_turns

    submit = None
    if extractor is not None:

        def submit(tenant: str, user: str, session: str, force: bool):
            return extractor.process.remote(tenant, user, session, force)

    trigger = ExtractionTrigger(
        submit, enabled=bool(settings.llm_base_url), every_n=settings.extract_every_n_turns
    )
    return {"extraction": trigger, "turn_recorder": record_turns}


async def extraction_probe(settings: Settings, extractor: Any | None) -> str:
    """Readiness line; never fails readiness: the chat path works without extraction."""
    if not settings.llm_base_url:
        return "disabled (no LLM configured; turns are stored as episodic memories)"
    if extractor is None:
        return "disabled (no extractor deployment)"
    try:
        status = await asyncio.wait_for(extractor.status.remote(), timeout=1.5)
    except Exception as exc:
        return f"degraded: extractor unreachable ({type(exc).__name__}); turns stay queued"
    circuit = status.get("llm_circuit")
    if circuit and circuit != "closed":
        return f"degraded: LLM circuit {circuit}; turns stay queued"
    return "ok"
