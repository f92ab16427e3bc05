"""Signing in with the platform's own tokens: a provider callable asked before each request.

An end-user app holds no memserve key; it holds short-lived tokens from its identity
provider (docs/identity.md). ``token_provider`` returns the current one (it caches and
refreshes as it likes; an async client's provider may be async); when the service
answers 401 the provider is asked once more and the request is retried once with a
token it now gives, so an expiry between the two is no error.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator

import httpx

TokenProvider = Callable[[], str] | Callable[[], Awaitable[str]]


class TokenAuth(httpx.Auth):
    def __init__(self, provider: TokenProvider) -> None:
        self.provider = provider

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        token = self.provider()
        if not isinstance(token, str):
            raise TypeError("a sync client's token_provider returns the token (a str)")
        response = yield _with(request, token)
        if response.status_code == 401 and (fresh := self.provider()) != token:
            yield _with(request, fresh)  # type: ignore[arg-type]

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._ask()
        response = yield _with(request, token)
        if response.status_code == 401 and (fresh := await self._ask()) != token:
            yield _with(request, fresh)

    async def _ask(self) -> str:
        token = self.provider()
        return await token if inspect.isawaitable(token) else token


def _with(request: httpx.Request, token: str) -> httpx.Request:
    request.headers["Authorization"] = f"Bearer {token}"
    return request
