"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from serve_app.api.deps import Svc
from serve_app.responses import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz():
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness)
async def readyz(services: Svc):
    """Ready when the database answers; also reports each component."""
    ok, components = await services.health.readiness()
    body = {"status": "ready" if ok else "unavailable", "components": components}
    return JSONResponse(body, status_code=200 if ok else 503)
