"""Typed errors of the Python client, from real httpx responses."""

from __future__ import annotations

import httpx
import pytest

from serve_app.client import errors
from serve_app.client.errors import MemserveError, RateLimited, raise_for


def response(status: int, code: str = "x", headers: dict | None = None) -> httpx.Response:
    body = {"error": {"code": code, "message": f"m{status}"}}
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    "status,cls",
    [
        (400, errors.InvalidRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (422, errors.InvalidRequest),
        (502, errors.Unavailable),
        (503, errors.Unavailable),
        (418, MemserveError),
    ],
)
def test_status_maps_to_error_class(status, cls):
    with pytest.raises(cls) as e:
        raise_for(response(status, "some_code"))
    assert e.value.status == status and e.value.code == "some_code"
    assert e.value.message == f"m{status}" and isinstance(e.value, MemserveError)


def test_rate_limited_carries_retry_after():
    with pytest.raises(RateLimited) as e:
        raise_for(response(429, "rate_limited", {"Retry-After": "7"}))
    assert e.value.retry_after == 7.0


def test_non_json_error_body_and_success():
    with pytest.raises(errors.Unavailable) as e:
        raise_for(httpx.Response(503, text="<html>down</html>"))
    assert e.value.code == "error" and "down" in e.value.message
    raise_for(httpx.Response(204))
