"""``MemserveClient``: the blocking client; the calls themselves are ``Api``'s."""

from __future__ import annotations

from typing import TypeVar

import httpx

from serve_app.client.base import BaseClient
from serve_app.client.call import Call

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

    def _run(self, call: Call[T]) -> T:
        r = self._http.request(call.method, call.path, params=call.params, json=call.json)
        return call.read(r)
