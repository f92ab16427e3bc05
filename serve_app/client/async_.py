"""``AsyncMemserveClient``: the asyncio client; the calls themselves are ``Api``'s."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx

from serve_app.client.base import BaseClient
from serve_app.client.call import Call
from serve_app.client.chunks import CHUNK_BYTES, CHUNK_RECORDS, ImportData, chunks, to_lines
from serve_app.client.errors import raise_for
from serve_app.responses import ImportReport

T = TypeVar("T")


class AsyncMemserveClient(BaseClient[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """asyncio client with the same methods as ``MemserveClient``, awaitable (streamed
    answers, ``export`` and ``chat_stream``, are async iterators)."""

    _http_class = httpx.AsyncClient

    async def __aenter__(self) -> AsyncMemserveClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def import_all(
        self,
        data: ImportData,
        *,
        user_id: str | None = None,
        chunk_bytes: int = CHUNK_BYTES,
        chunk_records: int = CHUNK_RECORDS,
    ) -> list[ImportReport]:
        """An export of any size, in requests under the service's limits (each all or
        nothing); a failing one raises and the chunks before it stay imported."""
        return [
            await self.import_(body, user_id=user_id)
            for body in chunks(to_lines(data), chunk_bytes, chunk_records)
        ]

    async def _run(self, call: Call[T]) -> T:
        return call.read(await self._http.request(call.method, call.path, **call.request()))

    async def _stream(self, call: Call[T]) -> AsyncIterator[T]:
        assert call.lines is not None
        async with self._http.stream(call.method, call.path, **call.request()) as r:
            if r.status_code >= 400:
                await r.aread()
                raise_for(r)
            reader = call.lines()
            async for line in r.aiter_lines():
                item: Any = reader.feed(line)
                if item is not None:
                    yield item
            reader.end()
