"""Request-scoped dependencies: the replica's services and the authenticated caller.

The services object is built once per replica by the composition root
(``serve_app.composition``) and set on ``app.state`` by the app factory; routes
ask for it, or for one service, with ``Depends``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from serve_app.auth import Principal
from serve_app.composition import Services
from serve_app.errors import ApiError


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a thread pool, which
    # cost the Ingress a thread hand-off per request (py-spy: ~15% of its samples).
    services = getattr(request.app.state, "services", None)
    if services is None:
        raise ApiError(503, "unavailable", "the service is starting up")
    return services


Svc = Annotated[Services, Depends(get_services)]


async def principal(request: Request, services: Svc) -> Principal:
    return await services.auth.principal(request.headers.get("authorization"))


Caller = Annotated[Principal, Depends(principal)]
