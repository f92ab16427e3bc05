"""``MemserveClient``: the blocking client; the calls themselves are ``Api``'s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import httpx

from serve_app.client.base import BaseClient
from serve_app.client.call import Call
from serve_app.client.chunks import CHUNK_BYTES, CHUNK_RECORDS, ImportData, chunks, to_lines
from serve_app.client.errors import raise_for
from serve_app.responses import ImportReport

T = TypeVar("T")


class MemserveClient(BaseClient[httpx.Client, httpx.BaseTransport]):
    """Blocking client; one connection pool per instance (use as a context manager)."""

    _http_class = httpx.Client

    def __enter__(self) -> MemserveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def import_all(
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
            self.import_(body, user_id=user_id)
            for body in chunks(to_lines(data), chunk_bytes, chunk_records)
        ]

    def _run(self, call: Call[T]) -> T:
        return call.read(self._http.request(call.method, call.path, **call.request()))

    def _stream(self, call: Call[T]) -> Iterator[T]:
        assert call.lines is not None
        with self._http.stream(call.method, call.path, **call.request()) as r:
            if r.status_code >= 400:
                r.read()
                raise_for(r)
            reader = call.lines()
            for line in r.iter_lines():
                item: Any = reader.feed(line)
                if item is not None:
                    yield item
            reader.end()
