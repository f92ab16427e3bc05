"""``Endpoint``: one API call written once, a method of both the sync and the async client.

An endpoint is a function that builds a ``Call``. Read from a client it becomes a
method with the same signature that sends the call through the client's ``_run``:
``MemserveClient.add(...)`` returns the result, ``AsyncMemserveClient.add(...)``
an awaitable of it. The overloads of ``__get__`` tell type checkers which.
``Stream`` is the same for an answer read line by line (``Call.lines``): an iterator
of its items from the sync client, an async iterator from the async one; the request
is sent when iteration starts.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from serve_app.client.call import Call

if TYPE_CHECKING:
    from serve_app.client.async_ import AsyncMemserveClient
    from serve_app.client.sync import MemserveClient

P = ParamSpec("P")
T = TypeVar("T")


class Endpoint(Generic[P, T]):
    """A descriptor wrapping a ``Call`` builder; see the module docstring."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.name = getattr(build, "__name__", "endpoint")
        self.__doc__ = build.__doc__
        self.__signature__ = inspect.signature(build)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, client: None, owner: type | None = None) -> Endpoint[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncMemserveClient, owner: type | None = None
    ) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __get__(self, client: MemserveClient, owner: type | None = None) -> Callable[P, T]: ...

    def __get__(self, client: Any, owner: type | None = None) -> Any:
        if client is None:
            return self
        build, run, stream = self.build, client._run, client._stream

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            call = build(*args, **kwargs)
            return stream(call) if call.lines is not None else run(call)

        method.__name__ = self.name
        method.__qualname__ = f"{type(client).__name__}.{self.name}"
        method.__doc__ = self.__doc__
        method.__signature__ = self.__signature__  # type: ignore[attr-defined]
        return method


class Stream(Endpoint[P, T]):
    """An endpoint whose answer is streamed: ``T`` is the type of each item."""

    @overload
    def __get__(self, client: None, owner: type | None = None) -> Stream[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncMemserveClient, owner: type | None = None
    ) -> Callable[P, AsyncIterator[T]]: ...

    @overload
    def __get__(
        self, client: MemserveClient, owner: type | None = None
    ) -> Callable[P, Iterator[T]]: ...

    def __get__(self, client: Any, owner: type | None = None) -> Any:
        return super().__get__(client, owner)
