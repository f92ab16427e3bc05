"""Who is calling, and whose memories they may touch.

The identity comes from the API key only: a service key acts for any user of
its tenant and must name one; a user key is bound to its user and may not name
another. A signed token of a tenant's trusted issuer (serve_app/identity/) acts as
a user key bound to the user it names, possibly read-only. The tenant is never
taken from the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serve_app.errors import ApiError
from serve_app.store.records import Owner

PRINCIPAL = "memserve.principal"  # scope["state"] key of the caller the gate let in
TOKEN_PREFIX = "token:"  # key_id of a token's principal: token:<issuer ref> (no api_keys row)


@dataclass(frozen=True)
class Principal:
    key_id: str
    tenant_id: str
    role: str  # admin | service | user
    user_id: str | None = None
    rate_limit_per_s: float | None = None  # the key's own rate (work units/s per end user)
    read_only: bool = False  # a token with a read-only scope: no write, forget or import

    @property
    def via_token(self) -> bool:
        """Signed in with a token (no API key row: nothing is counted against a key)."""
        return self.key_id.startswith(TOKEN_PREFIX)

    @property
    def actor(self) -> str:
        return f"{self.role}:{self.key_id}"


def authenticated(scope: Mapping[str, Any]) -> Principal:
    """The caller the stranger gate (serve_app/api/gate.py) let in, from an ASGI scope: a
    route or the MCP endpoint behind the gate always has one."""
    caller = scope.get("state", {}).get(PRINCIPAL)
    if caller is None:  # not behind the gate: refuse rather than serve anonymously
        raise ApiError(401, "unauthorized", "missing Authorization: Bearer <key> header")
    return caller


def bearer_token(header: str | None) -> str:
    """The key of an ``Authorization: Bearer <key>`` header (the one parser of it)."""
    if not header:
        raise ApiError(401, "unauthorized", "missing Authorization: Bearer <key> header")
    scheme, _, token = header.partition(" ")
    # "Token <key>" is the mem0 client's spelling (the /mem0 compatibility routes).
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        raise ApiError(401, "unauthorized", "expected Authorization: Bearer <key>")
    return token.strip()


def check_user_id(user_id: str | None) -> None:
    """422 for a reserved user id: '@...' names shared owners ('@org', '@agent:<id>'), and a
    user by that name would alias them."""
    if user_id is not None and user_id.startswith("@"):
        raise ApiError(422, "invalid_request", "user_id must not start with '@'")


def check_key_owner(role: str, user_id: str | None) -> None:
    """422 unless a new key of ``role`` may be bound to ``user_id``: a user key needs its
    user; service and admin keys act for any user (the API and the CLI both ask)."""
    if role == "user" and user_id is None:
        raise ApiError(422, "invalid_request", "a user key needs user_id")
    if role != "user" and user_id is not None:
        raise ApiError(422, "invalid_request", f"{role} keys act for any user; omit user_id")
    check_user_id(user_id)


def resolve_owner(principal: Principal, requested_user_id: str | None) -> Owner:
    """The owner a request acts on, or a 4xx if the key may not act for that user."""
    check_user_id(requested_user_id)
    if principal.role == "user":
        if requested_user_id is not None and requested_user_id != principal.user_id:
            raise ApiError(403, "forbidden", "a user key may only act for its own user")
        assert principal.user_id is not None
        return Owner(principal.tenant_id, principal.user_id)
    if requested_user_id is None:
        raise ApiError(400, "invalid_request", "user_id is required with a service key")
    return Owner(principal.tenant_id, requested_user_id)
