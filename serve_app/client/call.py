"""One API call as data: the HTTP request to send and how to read its answer.

Both clients send a ``Call`` and read the answer with ``Call.read``, so request
building and response parsing exist once, independent of sync or async transport.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

import httpx
from pydantic import BaseModel

from serve_app.client.errors import raise_for
from serve_app.client.streams import LineReader

T = TypeVar("T")
M = TypeVar("M")

Message = Mapping[str, Any] | tuple[str, str]


@dataclass(frozen=True)
class Call(Generic[T]):
    """The request of one API call; ``T`` is what ``read`` returns for its answer (for a
    streamed call, ``lines`` is set and ``T`` is the type of each item it yields)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    model: type[T] | None = None  # a pydantic model; None: the JSON body as is
    headers: dict[str, str] | None = None
    content: bytes | None = None  # a raw body (JSON Lines), instead of ``json``
    by_status: Mapping[int, type[BaseModel]] | None = None  # another model per status
    lines: Callable[[], LineReader] | None = None  # streamed: read line by line
    # A multipart upload (document files): its file parts and form fields
    files: dict[str, Any] | None = None
    form: dict[str, Any] | None = None

    def request(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` / ``.stream``."""
        out = {
            "params": self.params,
            "json": self.json,
            "content": self.content,
            "headers": self.headers,
        }
        if self.files is not None:
            out.update(files=self.files, data=self.form)
        return out

    def read(self, r: httpx.Response) -> T:
        """The typed result of a 2xx answer; a ``MemserveError`` for any other."""
        raise_for(r)
        if r.status_code == 204 or not r.content:
            return cast(T, None)
        data = r.json()
        model = (self.by_status or {}).get(r.status_code, self.model)
        if model is None:
            return cast(T, data)
        return cast(T, cast(type[BaseModel], model).model_validate(data))


def clean(d: Mapping[str, Any]) -> dict[str, Any]:
    """Drop unset (None) fields so the service applies its own defaults; datetimes as ISO
    8601 (what the API takes, in a query string or a JSON body)."""
    return {k: _iso(v) for k, v in d.items() if v is not None}


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


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


def to_messages(items: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat turns as the API's ``{"role", "content", ...}`` objects (a mapping is sent with
    all its fields, e.g. ``occurred_at``); ``(role, content)`` pairs too."""
    out: list[dict[str, Any]] = []
    for m in items:
        if isinstance(m, Mapping):
            out.append({k: _iso(v) for k, v in m.items()})
        else:
            role, content = m
            out.append({"role": role, "content": content})
    return out


def if_match_header(version: int | None) -> dict[str, str] | None:
    """``If-Match: "<version>"``: the write applies only to that version (else 409)."""
    return None if version is None else {"If-Match": f'"{version}"'}
