"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from serve_app.api.state import current

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request):
    """Ready when the database answers; also reports each component."""
    state = current()
    components: dict[str, object] = {}
    ok = True
    try:
        async with asyncio.timeout(2.0):
            async with state.pool.connection() as conn:
                await conn.execute("SELECT 1")
        components["database"] = "ok"
    except Exception as exc:  # any failure means not ready
        components["database"] = f"unavailable: {type(exc).__name__}"
        ok = False
    for name, probe in getattr(state, "readiness_probes", {}).items():
        try:
            async with asyncio.timeout(2.0):
                components[name] = await probe()
        except Exception as exc:
            components[name] = f"unavailable: {type(exc).__name__}"
            ok = False
    body = {"status": "ready" if ok else "unavailable", "components": components}
    return JSONResponse(body, status_code=200 if ok else 503)
