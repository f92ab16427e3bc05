"""FastAPI application factory (routes, error handlers, limits)."""

from __future__ import annotations

from fastapi import FastAPI

from serve_app import __version__
from serve_app.api import (
    admin,
    chat,
    context,
    documents,
    events,
    facts,
    health,
    identity,
    maintenance,
    mem0,
    memories,
    models_admin,
    portability,
    search,
    sessions,
    tenants,
    usage,
    users,
    webhooks,
)
from serve_app.api.console import mount_console
from serve_app.api.deps import principal
from serve_app.api.gate import StrangerGate, public_routes
from serve_app.api.input_guard import InputGuard
from serve_app.api.limits import BodySizeLimit
from serve_app.errors import install_handlers
from serve_app.mcp import mount_mcp
from serve_app.metrics import RequestMetrics
from serve_app.schemas import ErrorResponse
from serve_app.services.registry import Services
from serve_app.settings import Settings

# Every route may answer these, all as {"error": {"code", "message"}} (documented for clients
# and for schema-conformance fuzzing).
ERROR_RESPONSES: dict[int | str, dict] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Bad request (invalid JSON, missing user_id)"),
        (401, "Missing, invalid or revoked API key"),
        (403, "The key may not do this"),
        (404, "Not found (or not yours)"),
        (413, "Body too large"),
        (422, "Invalid request"),
        (429, "Rate limited (see Retry-After)"),
        (503, "A dependency is unavailable; retry later"),
    )
}
ROUTERS = (
    health,
    memories,
    search,
    context,
    documents,
    chat,
    admin,
    models_admin,
    maintenance,
    sessions,
    facts,
    events,
    portability,
    tenants,
    users,
    usage,
    webhooks,
    mem0,
    identity,
)


def _authenticator(app: FastAPI):
    services = app.state.services
    return services.auth if services is not None else None


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    """The HTTP app over ``services`` (None: routes answer 503 until they are set)."""
    app = FastAPI(
        title="memserve",
        version=__version__,
        description="Memory layer for LLM chat platforms. Auth: `Authorization: Bearer <key>`.",
        responses=ERROR_RESPONSES,
    )
    app.state.services = services
    install_handlers(app)
    console = mount_console(app)  # /console: static files, no key (the page asks for one)
    app.add_middleware(InputGuard)  # NUL, lone surrogates, deep nesting: 422 for every route
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.limits.body_bytes,
        paths={"/v1/documents": settings.documents.max_bytes},  # uploads: their own bound
    )
    app.add_middleware(
        StrangerGate,
        authenticator=lambda: _authenticator(app),
        public=lambda: [
            *public_routes(app, [r for module in ROUTERS for r in module.router.routes], principal),
            *console,
        ],
    )  # outside the body limit: a stranger's body is never read
    app.add_middleware(RequestMetrics)  # outermost: latency per route, 413s included
    for module in ROUTERS:
        app.include_router(module.router)
    mount_mcp(app, settings.limits.body_bytes)  # /mcp: the same calls as MCP tools
    return app
