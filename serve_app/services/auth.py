"""Who is calling: an API key to a ``Principal``, with the key's rate limit applied."""

from __future__ import annotations

from serve_app.auth import Principal, bearer_token
from serve_app.errors import ApiError
from serve_app.ratelimit import RateLimiter, retry_after_header
from serve_app.store.keys import KeyStore


class Authenticator:
    def __init__(self, keys: KeyStore, limiter: RateLimiter) -> None:
        self.keys = keys
        self.limiter = limiter

    async def principal(self, authorization: str | None) -> Principal:
        token = bearer_token(authorization)
        row = await self.keys.lookup(token)
        if row is None:
            raise ApiError(401, "unauthorized", "invalid or revoked API key")
        key_id = str(row["id"])
        wait = self.limiter.acquire(key_id, row.get("rate_limit_per_s"))
        if wait > 0:
            raise ApiError(
                429,
                "rate_limited",
                "too many requests for this API key; retry later",
                headers={"Retry-After": retry_after_header(wait)},
            )
        return Principal(key_id, row["tenant_id"], row["role"], row["user_id"])
