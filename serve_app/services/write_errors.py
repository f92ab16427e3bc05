"""What a refused write means to an API caller: the guarded writer's errors as 4xx."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from serve_app.errors import ApiError
from serve_app.store.guarded import ForgetInProgress, ValidationError
from serve_app.store.quota import QuotaExceeded
from serve_app.store.supersede import SupersedeRefused

_SUPERSEDE_CODES = {404: "not_found", 409: "conflict", 422: "invalid_request"}

RETRY_AFTER_S = "2"  # a forget runs in short chunks: worth retrying soon


@contextmanager
def write_errors() -> Iterator[None]:
    """422 for a record no store takes, 403 over a quota, 409 while a forget runs."""
    try:
        yield
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    except QuotaExceeded as exc:
        raise ApiError(403, "quota_exceeded", str(exc)) from None
    except SupersedeRefused as exc:  # supersedes: an id the caller may not retire
        raise ApiError(exc.status, _SUPERSEDE_CODES[exc.status], str(exc)) from None
    except ForgetInProgress as exc:
        raise ApiError(
            409, "forget_in_progress", str(exc), headers={"Retry-After": RETRY_AFTER_S}
        ) from None
