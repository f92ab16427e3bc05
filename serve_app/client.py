"""Python client for the memserve HTTP API (sync ``MemserveClient``, async ``AsyncMemserveClient``).

Results are the pydantic models of ``serve_app.schemas`` (sessions and facts,
whose shapes belong to the extraction API, come back as plain dicts); failures
raise ``MemserveError`` subclasses carrying the HTTP status and error code.

    with MemserveClient("http://127.0.0.1:8000", api_key) as m:
        m.add("I am vegetarian", user_id="alice")
        print(m.context("what should I cook?", user_id="alice").context)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

import httpx
from pydantic import BaseModel

from serve_app.schemas import (
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyList,
    ContextResponse,
    DeletedCount,
    HistoryResponse,
    Memory,
    MemoryBatch,
    MemoryList,
    SearchResponse,
)

M = TypeVar("M", bound=BaseModel)


class MemserveError(Exception):
    """An error answer of the service: HTTP status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class InvalidRequest(MemserveError):
    pass


class Unauthorized(MemserveError):
    pass


class Forbidden(MemserveError):
    pass


class NotFound(MemserveError):
    pass


class RateLimited(MemserveError):
    def __init__(self, status: int, code: str, message: str, retry_after: float) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class Unavailable(MemserveError):
    pass


_BY_STATUS: dict[int, type[MemserveError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: InvalidRequest,
    422: InvalidRequest,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def raise_for(r: httpx.Response) -> None:
    """Raise the typed error of a non-2xx answer."""
    if r.status_code < 400:
        return
    try:
        err = r.json()["error"]
        code, message = str(err["code"]), str(err["message"])
    except Exception:
        code, message = "error", r.text[:200]
    if r.status_code == 429:
        try:
            retry = float(r.headers.get("retry-after", "1"))
        except ValueError:
            retry = 1.0
        raise RateLimited(429, code, message, retry)
    cls = _BY_STATUS.get(r.status_code, MemserveError)
    raise cls(r.status_code, code, message)


def _clean(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _messages(messages: Iterable[Mapping[str, str] | tuple[str, str]]) -> list[dict[str, str]]:
    out = []
    for m in messages:
        role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else m
        out.append({"role": role, "content": content})
    return out


@dataclass(frozen=True)
class _Call:
    """One API call: the HTTP request and how to read its answer."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    model: type[BaseModel] | None = None


class _Api:
    """The API's calls, independent of sync/async transport."""

    @staticmethod
    def add(content: str, user_id: str | None, **fields: Any) -> _Call:
        body = _clean({"user_id": user_id, "content": content, **fields})
        return _Call("POST", "/v1/memories", json=body, model=Memory)

    @staticmethod
    def add_batch(items: list[dict[str, Any]], user_id: str | None) -> _Call:
        body = _clean({"user_id": user_id, "items": items})
        return _Call("POST", "/v1/memories/batch", json=body, model=MemoryBatch)

    @staticmethod
    def get(memory_id: UUID | str, user_id: str | None) -> _Call:
        params = _clean({"user_id": user_id})
        return _Call("GET", f"/v1/memories/{memory_id}", params=params, model=Memory)

    @staticmethod
    def update(memory_id: UUID | str, user_id: str | None, **changes: Any) -> _Call:
        params = _clean({"user_id": user_id})
        return _Call(
            "PATCH", f"/v1/memories/{memory_id}", params=params, json=changes, model=Memory
        )

    @staticmethod
    def delete(memory_id: UUID | str, user_id: str | None) -> _Call:
        return _Call("DELETE", f"/v1/memories/{memory_id}", params=_clean({"user_id": user_id}))

    @staticmethod
    def list(user_id: str | None, **filters: Any) -> _Call:
        params = _clean({"user_id": user_id, **filters})
        return _Call("GET", "/v1/memories", params=params, model=MemoryList)

    @staticmethod
    def delete_scope(user_id: str | None, agent_id: str | None, session_id: str | None) -> _Call:
        params = _clean({"user_id": user_id, "agent_id": agent_id, "session_id": session_id})
        return _Call("DELETE", "/v1/memories", params=params, model=DeletedCount)

    @staticmethod
    def history(memory_id: UUID | str, user_id: str | None) -> _Call:
        params = _clean({"user_id": user_id})
        return _Call(
            "GET", f"/v1/memories/{memory_id}/history", params=params, model=HistoryResponse
        )

    @staticmethod
    def search(query: str, user_id: str | None, **options: Any) -> _Call:
        body = _clean({"user_id": user_id, "query": query, **options})
        return _Call("POST", "/v1/search", json=body, model=SearchResponse)

    @staticmethod
    def context(query: str, user_id: str | None, history: Any, **options: Any) -> _Call:
        body = _clean({"user_id": user_id, "query": query, **options})
        if history:
            body["history"] = _messages(history)
        return _Call("POST", "/v1/context", json=body, model=ContextResponse)

    @staticmethod
    def add_turns(session_id: str, messages: Any, user_id: str | None, **options: Any) -> _Call:
        body = _clean({"user_id": user_id, "messages": _messages(messages), **options})
        return _Call("POST", f"/v1/sessions/{session_id}/turns", json=body)

    @staticmethod
    def end_session(session_id: str, user_id: str | None) -> _Call:
        body = _clean({"user_id": user_id})
        return _Call("POST", f"/v1/sessions/{session_id}/end", json=body)

    @staticmethod
    def facts(user_id: str | None, **filters: Any) -> _Call:
        return _Call("GET", "/v1/facts", params=_clean({"user_id": user_id, **filters}))

    @staticmethod
    def create_key(role: str, user_id: str | None, **options: Any) -> _Call:
        body = _clean({"role": role, "user_id": user_id, **options})
        return _Call("POST", "/v1/admin/keys", json=body, model=ApiKeyCreated)

    @staticmethod
    def list_keys() -> _Call:
        return _Call("GET", "/v1/admin/keys", model=ApiKeyList)

    @staticmethod
    def get_key(key_id: UUID | str) -> _Call:
        return _Call("GET", f"/v1/admin/keys/{key_id}", model=ApiKeyInfo)

    @staticmethod
    def revoke_key(key_id: UUID | str) -> _Call:
        return _Call("DELETE", f"/v1/admin/keys/{key_id}")


def _read(call: _Call, r: httpx.Response) -> Any:
    raise_for(r)
    if r.status_code == 204 or not r.content:
        return None
    data = r.json()
    return call.model.model_validate(data) if call.model else data


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class MemserveClient:
    """Blocking client; one connection pool per instance (use as a context manager)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    def __enter__(self) -> MemserveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _do(self, call: _Call) -> Any:
        r = self._http.request(call.method, call.path, params=call.params, json=call.json)
        return _read(call, r)

    # memories
    def add(self, content: str, *, user_id: str | None = None, **fields: Any) -> Memory:
        return self._do(_Api.add(content, user_id, **fields))

    def add_batch(self, items: list[dict[str, Any]], *, user_id: str | None = None) -> MemoryBatch:
        return self._do(_Api.add_batch(items, user_id))

    def get(self, memory_id: UUID | str, *, user_id: str | None = None) -> Memory:
        return self._do(_Api.get(memory_id, user_id))

    def update(
        self, memory_id: UUID | str, *, user_id: str | None = None, **changes: Any
    ) -> Memory:
        return self._do(_Api.update(memory_id, user_id, **changes))

    def delete(self, memory_id: UUID | str, *, user_id: str | None = None) -> None:
        self._do(_Api.delete(memory_id, user_id))

    def list(self, *, user_id: str | None = None, **filters: Any) -> MemoryList:
        return self._do(_Api.list(user_id, **filters))

    def delete_scope(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> DeletedCount:
        return self._do(_Api.delete_scope(user_id, agent_id, session_id))

    def history(self, memory_id: UUID | str, *, user_id: str | None = None) -> HistoryResponse:
        return self._do(_Api.history(memory_id, user_id))

    # retrieval
    def search(self, query: str, *, user_id: str | None = None, **options: Any) -> SearchResponse:
        return self._do(_Api.search(query, user_id, **options))

    def context(
        self, query: str, *, user_id: str | None = None, history: Any = None, **options: Any
    ) -> ContextResponse:
        return self._do(_Api.context(query, user_id, history, **options))

    # sessions and facts
    def add_turns(
        self, session_id: str, messages: Any, *, user_id: str | None = None, **options: Any
    ) -> dict[str, Any] | None:
        return self._do(_Api.add_turns(session_id, messages, user_id, **options))

    def end_session(self, session_id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        return self._do(_Api.end_session(session_id, user_id))

    def facts(self, *, user_id: str | None = None, **filters: Any) -> dict[str, Any]:
        return self._do(_Api.facts(user_id, **filters))

    # admin
    def create_key(self, role: str, *, user_id: str | None = None, **options: Any) -> ApiKeyCreated:
        return self._do(_Api.create_key(role, user_id, **options))

    def list_keys(self) -> ApiKeyList:
        return self._do(_Api.list_keys())

    def get_key(self, key_id: UUID | str) -> ApiKeyInfo:
        return self._do(_Api.get_key(key_id))

    def revoke_key(self, key_id: UUID | str) -> None:
        self._do(_Api.revoke_key(key_id))

    # health
    def health(self) -> dict[str, Any]:
        return _read(_Call("GET", "/healthz"), self._http.get("/healthz"))

    def ready(self) -> dict[str, Any]:
        return _read(_Call("GET", "/readyz"), self._http.get("/readyz"))


class AsyncMemserveClient:
    """asyncio client with the same methods as ``MemserveClient``, awaitable."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncMemserveClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _do(self, call: _Call) -> Any:
        r = await self._http.request(call.method, call.path, params=call.params, json=call.json)
        return _read(call, r)

    async def add(self, content: str, *, user_id: str | None = None, **fields: Any) -> Memory:
        return await self._do(_Api.add(content, user_id, **fields))

    async def add_batch(
        self, items: list[dict[str, Any]], *, user_id: str | None = None
    ) -> MemoryBatch:
        return await self._do(_Api.add_batch(items, user_id))

    async def get(self, memory_id: UUID | str, *, user_id: str | None = None) -> Memory:
        return await self._do(_Api.get(memory_id, user_id))

    async def update(
        self, memory_id: UUID | str, *, user_id: str | None = None, **changes: Any
    ) -> Memory:
        return await self._do(_Api.update(memory_id, user_id, **changes))

    async def delete(self, memory_id: UUID | str, *, user_id: str | None = None) -> None:
        await self._do(_Api.delete(memory_id, user_id))

    async def list(self, *, user_id: str | None = None, **filters: Any) -> MemoryList:
        return await self._do(_Api.list(user_id, **filters))

    async def delete_scope(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> DeletedCount:
        return await self._do(_Api.delete_scope(user_id, agent_id, session_id))

    async def history(
        self, memory_id: UUID | str, *, user_id: str | None = None
    ) -> HistoryResponse:
        return await self._do(_Api.history(memory_id, user_id))

    async def search(
        self, query: str, *, user_id: str | None = None, **options: Any
    ) -> SearchResponse:
        return await self._do(_Api.search(query, user_id, **options))

    async def context(
        self, query: str, *, user_id: str | None = None, history: Any = None, **options: Any
    ) -> ContextResponse:
        return await self._do(_Api.context(query, user_id, history, **options))

    async def add_turns(
        self, session_id: str, messages: Any, *, user_id: str | None = None, **options: Any
    ) -> dict[str, Any] | None:
        return await self._do(_Api.add_turns(session_id, messages, user_id, **options))

    async def end_session(
        self, session_id: str, *, user_id: str | None = None
    ) -> dict[str, Any] | None:
        return await self._do(_Api.end_session(session_id, user_id))

    async def facts(self, *, user_id: str | None = None, **filters: Any) -> dict[str, Any]:
        return await self._do(_Api.facts(user_id, **filters))

    async def create_key(
        self, role: str, *, user_id: str | None = None, **options: Any
    ) -> ApiKeyCreated:
        return await self._do(_Api.create_key(role, user_id, **options))

    async def list_keys(self) -> ApiKeyList:
        return await self._do(_Api.list_keys())

    async def get_key(self, key_id: UUID | str) -> ApiKeyInfo:
        return await self._do(_Api.get_key(key_id))

    async def revoke_key(self, key_id: UUID | str) -> None:
        await self._do(_Api.revoke_key(key_id))

    async def health(self) -> dict[str, Any]:
        return _read(_Call("GET", "/healthz"), await self._http.get("/healthz"))

    async def ready(self) -> dict[str, Any]:
        return _read(_Call("GET", "/readyz"), await self._http.get("/readyz"))
