"""The extraction line of ``/readyz``: never fails readiness, the chat path works without it."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.settings import Settings


async def extraction_probe(settings: Settings, extractor: Any | None) -> str:
    if not settings.llm.base_url:
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
