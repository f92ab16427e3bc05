"""/console: the memory console's static files (serve_app/console), served by the Ingress.

The page itself holds no data and needs no key; everything it shows it fetches from
the public API with the key the operator pastes (kept in the tab's sessionStorage).
Its Content-Security-Policy allows only its own scripts and styles and no inline code,
so text that slipped into the DOM as HTML still could not run.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

PATH = "/console"
STATIC = Path(__file__).resolve().parents[1] / "console"
HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        b" connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
)


class _Static(StaticFiles):
    """StaticFiles with the console's security headers on every answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *HEADERS]}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


async def _to_index(request) -> RedirectResponse:
    return RedirectResponse(PATH + "/", status_code=308)


def mount_console(app: FastAPI) -> list[BaseRoute]:
    """Serve the console at /console/ (/console redirects); the routes, all public."""
    routes: list[BaseRoute] = [
        Route(PATH, _to_index, methods=["GET", "HEAD"], include_in_schema=False),
        Mount(PATH, app=_Static(directory=STATIC, html=True), name="console"),
    ]
    app.router.routes.extend(routes)
    return routes
