"""Body-size limit enforced before the body is parsed, however the body is sent.

A Content-Length over the limit is refused at once. Any body (chunked, or longer
than it said) is counted while the app reads it; when it goes over, the middleware answers 413
itself, tells the app the client went away, and drops whatever the app answers
after that (frameworks turn a failing read into their own 400, which must not win).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.errors import error_response


class BodySizeLimit:
    """Reject bodies over ``max_bytes`` with 413, by header or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int, paths: dict[str, int] | None = None) -> None:
        """``paths``: a route's own limit (document uploads), instead of ``max_bytes``."""
        self.app = app
        self.max_bytes = max_bytes
        self.paths = paths or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.paths.get(scope.get("path", ""), self.max_bytes)
        if limit != self.max_bytes:
            await BodySizeLimit(self.app, limit)(scope, receive, send)
            return
        length = next((v for k, v in scope.get("headers") or () if k == b"content-length"), None)
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                await error_response(400, "invalid_request", "bad Content-Length")(
                    scope, receive, send
                )
                return
            if too_big:
                await self._too_big(scope, receive, send)
                return
        seen = 0
        refused = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await self._too_big(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 is already out; the app's own answer goes nowhere
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Built only when needed: this middleware sees every request.
        response = error_response(413, "payload_too_large", f"body over {self.max_bytes} bytes")
        await response(scope, receive, send)
