"""Strangers are turned away before routing: the cheapest possible 401/429.

A flood of random API keys must not cost the valid users' CPU. The Authenticator
already answers a cached-unknown key or an address out of failed-lookup budget
without the database, but only after FastAPI has routed the request, read and
parsed its body and run the dependency chain (~1 ms of CPU each on the Ingress).
This raw ASGI layer asks the same two in-memory questions from the headers alone
and answers (after ``stranger_delay_s``: a tarpit that slows a closed-loop flood to
its connections / delay, holding a coroutine rather than burning CPU); anything it
cannot decide goes on to the app unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.errors import error_response
from serve_app.services.auth import Authenticator


class StrangerGate:
    def __init__(self, app: ASGIApp, authenticator: Callable[[], Authenticator | None]) -> None:
        self.app = app
        self.authenticator = authenticator  # per request: a model switch swaps the services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            auth = self.authenticator()
            header = _authorization(scope)
            if auth is not None and header is not None:
                client = scope.get("client")
                refusal = auth.refuse_early(header, client[0] if client else None)
                if refusal is not None:
                    if auth.stranger_delay_s > 0:
                        await asyncio.sleep(auth.stranger_delay_s)
                    await error_response(
                        refusal.status, refusal.code, refusal.message, refusal.headers
                    )(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _authorization(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return value.decode("latin-1")
    return None
