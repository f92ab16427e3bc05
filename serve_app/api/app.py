"""FastAPI application factory (routes, error handlers, limits)."""

from __future__ import annotations

from fastapi import FastAPI

from serve_app import __version__
from serve_app.api import health, memories, search
from serve_app.api.limits import BodySizeLimit
from serve_app.errors import install_handlers
from serve_app.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(
        title="memserve",
        version=__version__,
        description="Memory layer for LLM chat platforms. Auth: `Authorization: Bearer <key>`.",
    )
    install_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    for module in (health, memories, search):
        app.include_router(module.router)
    return app
