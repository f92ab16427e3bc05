"""Request-scoped dependencies: the authenticated principal and the app's services."""

from __future__ import annotations

from fastapi import Request

from serve_app import ratelimit
from serve_app.api.state import current
from serve_app.auth import Principal, bearer_token
from serve_app.errors import ApiError


async def principal(request: Request) -> Principal:
    token = bearer_token(request.headers.get("authorization"))
    row = await current().keys.lookup(token)
    if row is None:
        raise ApiError(401, "unauthorized", "invalid or revoked API key")
    ratelimit.check(str(row["id"]), row.get("rate_limit_per_s"))
    return Principal(str(row["id"]), row["tenant_id"], row["role"], row["user_id"])
