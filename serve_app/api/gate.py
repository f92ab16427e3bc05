"""Every request is authenticated before anything reads its body: strangers cost nothing.

FastAPI reads and parses a route's JSON body before its dependencies run, so a key
checked in a dependency let anyone without one make the Ingress parse up to a whole
body limit of JSON (and see 413/422 instead of 401). This raw ASGI layer, in front of
the body limit and the router, authenticates from the headers alone: a request
without a valid key (missing, malformed, unknown or revoked, or from an address out
of failed-lookup budget) is answered 401/429 after ``stranger_delay_s`` (a tarpit
that slows a closed-loop flood to its connections / delay, holding a coroutine
rather than burning CPU), and its body is never read. A caller that passes is put in
the request's state for the ``Caller`` dependency. Only routes that never ask for a
caller (health, OpenAPI docs) are let through without a key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.auth import PRINCIPAL
from serve_app.errors import ApiError, error_response, response_for
from serve_app.services.auth import Authenticator


class StrangerGate:
    def __init__(
        self,
        app: ASGIApp,
        authenticator: Callable[[], Authenticator | None],
        public: Callable[[], Iterable[BaseRoute]] = tuple,
    ) -> None:
        self.app = app
        self.authenticator = authenticator  # per request: a model switch swaps the services
        self.public = public  # the routes that need no key (read when first needed)
        self._public: tuple[BaseRoute, ...] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_public(scope):
            await self.app(scope, receive, send)
            return
        auth = self.authenticator()
        if auth is None:
            await error_response(503, "unavailable", "the service is starting up")(
                scope, receive, send
            )
            return
        client = scope.get("client")
        try:
            caller = await auth.principal(_authorization(scope), client[0] if client else None)
        except ApiError as refusal:
            if refusal.status == 401 and _is_mcp(scope):  # MCP clients discover sign-in
                public_url = auth.tokens.s.public_url if auth.tokens is not None else None
                challenge = f'Bearer resource_metadata="{metadata_url(scope, public_url)}"'
                refusal.headers = {**(refusal.headers or {}), "WWW-Authenticate": challenge}
            if auth.stranger_delay_s > 0:
                await asyncio.sleep(auth.stranger_delay_s)
            await response_for(refusal)(scope, receive, send)
            return
        except Exception as exc:  # the key store's database is down: 503, as on a route
            await response_for(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = caller
        await self.app(scope, receive, send)

    def _is_public(self, scope: Scope) -> bool:
        if self._public is None:
            self._public = tuple(self.public())
        return any(route.matches(scope)[0] is not Match.NONE for route in self._public)


def public_routes(
    app: FastAPI, routes: Iterable[BaseRoute], needs_key: Callable
) -> list[BaseRoute]:
    """The routes that answer without a key: FastAPI's docs, and those of ``routes`` (the
    included routers' own, full paths) whose dependencies never call ``needs_key``.
    Anything else (an unknown path, /mcp, a route nested deeper) is behind the gate."""
    docs = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    public = [r for r in app.routes if getattr(r, "path", None) in docs - {None}]
    for route in routes:
        if isinstance(route, APIRoute) and not _calls(route.dependant, needs_key):
            public.append(route)
    return public


def _calls(dependant, needs_key: Callable) -> bool:
    return any(d.call is needs_key or _calls(d, needs_key) for d in dependant.dependencies)


MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource"  # RFC 9728


def _is_mcp(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


def base_url(scope: Scope, public_url: str | None) -> str:
    """The service's URL as its callers see it: the operator's, else the request's."""
    if public_url:
        return public_url.rstrip("/")
    host = next((v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"host"), "")
    server = scope.get("server") or ("localhost", None)
    host = host or (f"{server[0]}:{server[1]}" if server[1] else server[0])
    return f"{scope.get('scheme', 'http')}://{host}"


def metadata_url(scope: Scope, public_url: str | None) -> str:
    """Where the protected resource metadata of the MCP endpoint asked is (RFC 9728,
    section 3.1: the well-known path, then the resource's): ``/mcp`` or a tenant's
    ``/mcp/{tenant}``."""
    path = scope.get("path", "")
    resource = path.rstrip("/") if _is_mcp(scope) else MCP_PATH
    return base_url(scope, public_url) + METADATA_PATH + resource


def _authorization(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return value.decode("latin-1")
    return None
