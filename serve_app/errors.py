"""One error shape for every failure: {"error": {"code", "message"}}."""

from __future__ import annotations

import logging

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from ray.exceptions import RayError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(status: int, code: str, message: str, headers: dict | None = None):
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def describe(errors: list[dict]) -> str:
    """A validation's errors (pydantic's ``errors()``) as one line: the first five, each
    with its field's path."""
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


_STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def response_for(exc: Exception) -> JSONResponse:
    """The answer to ``exc``: the app's handlers use it, and so do the raw ASGI layers
    in front of the router (the stranger gate), which those handlers never see."""
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers)
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "invalid_json", "request body is not valid JSON")
        return error_response(422, "invalid_request", describe(errors))
    if isinstance(exc, StarletteHTTPException):
        code = _STATUS_CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, code, str(exc.detail))
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return error_response(503, "unavailable", "the database did not answer in time")
    if isinstance(exc, psycopg.OperationalError | PoolTimeout):
        log.warning("database unavailable: %s", exc)
        return error_response(503, "unavailable", "the database is unavailable; retry later")
    if isinstance(exc, RayError):
        log.warning("a backend deployment failed: %s", exc)
        return error_response(503, "unavailable", "a backend tier is unavailable; retry later")
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal", "internal error")


_HANDLED = (
    ApiError,
    RequestValidationError,
    StarletteHTTPException,
    psycopg.OperationalError,
    PoolTimeout,
    RayError,
    Exception,
)


def install_handlers(app: FastAPI) -> None:
    async def handle(_: Request, exc: Exception) -> JSONResponse:
        return response_for(exc)

    for kind in _HANDLED:
        app.add_exception_handler(kind, handle)
