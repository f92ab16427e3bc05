"""Typed errors of the client: one class per kind of failure a caller handles differently."""

from __future__ import annotations

import httpx


class MemserveError(Exception):
    """An error answer of the service: HTTP status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class InvalidRequest(MemserveError):
    """The request is wrong (400, 413, 422): retrying it unchanged fails again."""


class Unauthorized(MemserveError):
    """The API key is missing, unknown or revoked (401)."""


class Forbidden(MemserveError):
    """The key is valid but its role or user may not do this (403)."""


class NotFound(MemserveError):
    """The memory, key or route does not exist for this caller (404)."""


class RateLimited(MemserveError):
    """Too many requests (429); ``retry_after`` says how many seconds to wait."""

    def __init__(self, status: int, code: str, message: str, retry_after: float) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class Unavailable(MemserveError):
    """The service or a dependency is down or overloaded (502-504): worth retrying later."""


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
