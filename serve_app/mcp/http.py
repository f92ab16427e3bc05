"""``/mcp`` on the Ingress app: the MCP server over streamable HTTP, stateless.

Stateless JSON responses because the Ingress has several replicas behind a proxy that
does not pin a client to one: every MCP request stands alone, so any replica answers
it. The bearer key is checked before the MCP layer, by the app's stranger gate (a bad
key is an HTTP 401 in the API's error shape, the same as on ``/v1``); each tool then
calls the API in-process (``httpx.ASGITransport``, no socket) with that key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from serve_app.auth import Principal, authenticated, bearer_token
from serve_app.client import AsyncMemserveClient
from serve_app.errors import error_response
from serve_app.mcp.tools import build_server

PATH = "/mcp"
_PRINCIPAL = "memserve.mcp.principal"
_TOKEN = "memserve.mcp.token"
_LOOPBACK = "http://memserve.internal"


class InProcess:
    """Tool calls as in-process API calls carrying the MCP request's own key."""

    def __init__(self, app: FastAPI) -> None:
        self.transport = httpx.ASGITransport(app=app)

    @staticmethod
    def _state(ctx: Context) -> dict[str, Any]:
        return ctx.request_context.request.scope["state"]

    @asynccontextmanager
    async def client(self, ctx: Context) -> AsyncIterator[AsyncMemserveClient]:
        token = self._state(ctx)[_TOKEN]
        async with AsyncMemserveClient(_LOOPBACK, token, transport=self.transport) as api:
            yield api

    async def may_name_users(self, ctx: Context) -> bool:
        principal: Principal = self._state(ctx)[_PRINCIPAL]
        return principal.role != "user"


class _Gate:
    """Hands the authenticated request, with its caller and key, to the MCP session manager."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The stranger gate in front of the app authenticated the key (401/429 there).
        principal = authenticated(scope)
        tenant = (scope.get("path_params") or {}).get("tenant")
        if tenant is not None and tenant != principal.tenant_id:
            # A tenant's endpoint serves that tenant's callers (its sign-in page is its
            # own): another tenant's key or token is refused, as on a foreign id.
            message = "this MCP endpoint is another tenant's"
            await error_response(403, "forbidden", message)(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[_PRINCIPAL] = principal
        state[_TOKEN] = bearer_token(Headers(scope=scope).get("authorization"))
        await self.handle(scope, receive, send)


def mount_mcp(app: FastAPI, body_bytes: int) -> None:
    """Serve the MCP tools at ``/mcp`` and run their session manager in the app's lifespan."""
    server = build_server(InProcess(app))
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        max_request_body_size=body_bytes,
        # Every request needs a bearer key, which a DNS-rebinding page does not have; a
        # Host allow-list would refuse the cluster's own service names.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    gate = _Gate(manager.handle_request)
    app.add_route(PATH, gate, include_in_schema=False)
    # A tenant's own endpoint: its 401 points at that tenant's sign-in document.
    app.add_route(PATH + "/{tenant}", gate, include_in_schema=False)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with manager.run(), inner(a) as state:
            yield state

    app.router.lifespan_context = lifespan
