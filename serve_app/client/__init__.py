"""Python client for the memserve HTTP API (sync ``MemserveClient``, async ``AsyncMemserveClient``).

Every route of the API (``routes.ROUTES``; mem0's and MCP's protocols excepted) is
a method. Results are the pydantic models the routes declare (``serve_app.schemas``,
``serve_app.responses``); the chat proxy's are the upstream's OpenAI JSON (dicts).
``export`` and ``chat_stream`` stream (iterators; async iterators on the async
client); ``import_all`` loads an export of any size in chunks. Failures raise
``MemserveError`` subclasses carrying the HTTP status and error code.

    with MemserveClient("http://127.0.0.1:8000", api_key) as m:
        m.add("I am vegetarian", user_id="alice")
        print(m.context("what should I cook?", user_id="alice").context)

Layout: ``api`` (with ``api_data`` and ``api_admin``) lists every call once
(request and result type), ``endpoint`` makes each a method of both clients,
``call`` describes a request and reads its answer, ``streams`` reads streamed ones,
``chunks`` splits imports, ``errors`` maps error answers to exceptions, ``base``
opens the connection, and ``sync``/``async_`` send calls over it.
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
