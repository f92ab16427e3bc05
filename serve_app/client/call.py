"""One API call as data: the HTTP request to send and how to read its answer.

Both clients send a ``Call`` and read the answer with ``Call.read``, so request
building and response parsing exist once, independent of sync or async transport.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import httpx
from pydantic import BaseModel

from serve_app.client.errors import raise_for

T = TypeVar("T")
M = TypeVar("M")

Message = Mapping[str, str] | tuple[str, str]


@dataclass(frozen=True)
class Call(Generic[T]):
    """The request of one API call; ``T`` is what ``read`` returns for its answer."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    model: type[T] | None = None  # a pydantic model; None: the JSON body as is

    def read(self, r: httpx.Response) -> T:
        """The typed result of a 2xx answer; a ``MemserveError`` for any other."""
        raise_for(r)
        if r.status_code == 204 or not r.content:
            return cast(T, None)
        data = r.json()
        if self.model is None:
            return cast(T, data)
        return cast(T, cast(type[BaseModel], self.model).model_validate(data))


def clean(d: Mapping[str, Any]) -> dict[str, Any]:
    """Drop unset (None) fields so the service applies its own defaults."""
    return {k: v for k, v in d.items() if v is not None}


def with_params(
    method: str, path: str, params: Mapping[str, Any], model: type[M] | None = None
) -> Call[M]:
    """A call whose arguments travel in the query string; unset (None) ones are left out."""
    return Call(method, path, params=clean(params), model=model)


def with_body(
    method: str, path: str, body: Mapping[str, Any], model: type[M] | None = None
) -> Call[M]:
    """A call whose arguments travel as a JSON object; unset (None) ones are left out."""
    return Call(method, path, json=clean(body), model=model)


def to_messages(items: Iterable[Message]) -> list[dict[str, str]]:
    """Chat turns as the API's ``{"role", "content"}`` objects; ``(role, content)`` pairs too."""
    out = []
    for m in items:
        role, content = (m["role"], m["content"]) if isinstance(m, Mapping) else m
        out.append({"role": role, "content": content})
    return out
