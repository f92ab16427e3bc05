"""``AsyncMemserveClient``: the asyncio client; the calls themselves are ``Api``'s."""

from __future__ import annotations

from typing import TypeVar

import httpx

from serve_app.client.base import BaseClient
from serve_app.client.call import Call

T = TypeVar("T")


class AsyncMemserveClient(BaseClient[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """asyncio client with the same methods as ``MemserveClient``, awaitable."""

    _http_class = httpx.AsyncClient

    async def __aenter__(self) -> AsyncMemserveClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call[T]) -> T:
        r = await self._http.request(call.method, call.path, params=call.params, json=call.json)
        return call.read(r)
