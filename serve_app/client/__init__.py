"""Python client for the memserve HTTP API (sync ``MemserveClient``, async ``AsyncMemserveClient``).

Results are the pydantic models of ``serve_app.schemas`` (sessions and facts,
whose shapes belong to the extraction API, come back as plain dicts); failures
raise ``MemserveError`` subclasses carrying the HTTP status and error code.

    with MemserveClient("http://127.0.0.1:8000", api_key) as m:
        m.add("I am vegetarian", user_id="alice")
        print(m.context("what should I cook?", user_id="alice").context)

Layout: ``api`` lists every call once (request and result type), ``endpoint``
makes each a method of both clients, ``call`` describes a request and reads its
answer, ``errors`` maps error answers to exceptions, ``base`` opens the connection,
and ``sync``/``async_`` send calls over it.
"""

from serve_app.client.async_ import AsyncMemserveClient
from serve_app.client.errors import (
    Forbidden,
    InvalidRequest,
    MemserveError,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    raise_for,
)
from serve_app.client.sync import MemserveClient

__all__ = [
    "AsyncMemserveClient",
    "Forbidden",
    "InvalidRequest",
    "MemserveClient",
    "MemserveError",
    "NotFound",
    "RateLimited",
    "Unauthorized",
    "Unavailable",
    "raise_for",
]
