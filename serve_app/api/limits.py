"""Body-size limit enforced before the body is parsed."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.errors import error_response


class BodySizeLimit:
    """Reject bodies over ``max_bytes`` with 413, by header or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope.get("headers") or () if k == b"content-length"), None)
        if length is not None:
            try:
                if int(length) > self.max_bytes:
                    await self._too_big(scope, receive, send)
                    return
            except ValueError:
                await error_response(400, "invalid_request", "bad Content-Length")(
                    scope, receive, send
                )
                return
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._too_big(scope, receive, send)

    async def _too_big(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Built only when needed: this middleware sees every request.
        response = error_response(413, "payload_too_large", f"body over {self.max_bytes} bytes")
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass
