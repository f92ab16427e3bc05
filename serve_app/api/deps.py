"""Request-scoped dependencies: the replica's services and the authenticated caller.

The services object is built once per replica by the composition root
(``serve_app.composition``) and set on ``app.state`` by the app factory; routes
ask for it, or for one service, with ``Depends``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from serve_app.auth import Principal
from serve_app.composition import Services
from serve_app.errors import ApiError
from serve_app.ratelimit import work_units


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a thread pool, which
    # cost the Ingress a thread hand-off per request (py-spy: ~15% of its samples).
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise ApiError(503, "unavailable", "the service is starting up")
    return services


Svc = Annotated[Services, Depends(get_services)]


async def request_work(request: Request) -> tuple[str | None, float]:
    """(end user named by the request, work units it asks for), before it is validated.

    FastAPI has read and parsed a JSON body before dependencies run, so both calls
    below return cached values; a body that does not parse costs one unit per KiB.
    """
    raw = await request.body()
    body: Any = None
    if raw:
        try:
            body = await request.json()
        except ValueError:
            body = None
    user = None
    if isinstance(body, dict):
        user = body.get("user_id") or body.get("user")
    if user is None:
        user = request.query_params.get("user_id")
    return (user if isinstance(user, str) else None), work_units(body, len(raw))


async def principal(request: Request, services: Svc) -> Principal:
    auth = services.auth
    client = request.client.host if request.client is not None else None
    caller = await auth.principal(request.headers.get("authorization"), client)
    user, units = await request_work(request)
    tenant = (
        None if services.tenants is None else await services.tenants.effective(caller.tenant_id)
    )
    auth.charge(caller, user, units, tenant)  # the tenant's rate limits (settings)
    return caller


Caller = Annotated[Principal, Depends(principal)]
