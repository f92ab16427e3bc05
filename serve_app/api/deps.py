"""Request-scoped dependencies: the replica's services and the authenticated caller.

The services object is built once per replica by the composition root
(``serve_app.composition``) and set on ``app.state`` by the app factory; routes
ask for it, or for one service, with ``Depends``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from serve_app.auth import Principal, authenticated
from serve_app.errors import ApiError
from serve_app.ratelimit import end_user, work_units
from serve_app.services.registry import Services


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a thread pool, which
    # cost the Ingress a thread hand-off per request (py-spy: ~15% of its samples).
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise ApiError(503, "unavailable", "the service is starting up")
    return services


Svc = Annotated[Services, Depends(get_services)]


# Routes that parse their body off the event loop and charge their own work by what it
# holds (import: one unit per record); their body is not read here.
SELF_CHARGED = frozenset({"/v1/import", "/v1/documents"})  # documents: a unit per chunk


async def request_work(request: Request) -> tuple[str | None, float]:
    """(end user named by the request, work units it asks for), before it is validated.

    Called once the caller is authenticated; a body that does not parse costs one
    unit per KiB.
    """
    route = getattr(request.scope.get("route"), "path", None)
    if route in SELF_CHARGED:  # parsed off the event loop and charged per record there
        return request.query_params.get("user_id"), 1.0
    raw = await request.body()
    body: Any = None
    if raw:
        try:
            body = await request.json()
        except ValueError:
            body = None
    user = end_user(body) or request.query_params.get("user_id")
    return user, work_units(body, len(raw))


# What a read-only token may call besides GET: reads that take their query in a body.
READ_ONLY_POSTS = frozenset(
    {"/v1/search", "/v1/context", "/mem0/v3/memories/search/", "/mem0/v3/memories/"}
)


def check_may_write(request: Request, caller: Principal) -> None:
    """403 when a read-only caller asks for anything but a read."""
    if not caller.read_only or request.method in ("GET", "HEAD"):
        return
    if getattr(request.scope.get("route"), "path", None) not in READ_ONLY_POSTS:
        raise ApiError(403, "forbidden", "a read-only token may not write, forget or import")


async def principal(request: Request, services: Svc) -> Principal:
    """The caller the stranger gate authenticated (before the body was read), charged
    for the work its request asks for."""
    caller = authenticated(request.scope)
    check_may_write(request, caller)
    user, units = await request_work(request)
    # Admin keys are charged at the environment's rates (or their own), never at the rates
    # their tenant set: a tenant that throttled itself can always reach its settings again.
    tenant = None if caller.role == "admin" else await services.tenants.effective(caller.tenant_id)
    services.auth.charge(caller, user, units, tenant)  # the tenant's rate limits (settings)
    return caller


Caller = Annotated[Principal, Depends(principal)]


def page_limit(limit: int, services: Services) -> int:
    """``limit`` of a paged list, refused (422) above ``MEMSERVE_MAX_LIST_LIMIT``."""
    top = services.settings.limits.list_limit
    if limit > top:
        raise ApiError(422, "invalid_request", f"limit must be at most {top}")
    return limit
