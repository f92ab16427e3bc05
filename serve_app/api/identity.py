"""OAuth protected resource metadata (RFC 9728) for MCP: where to sign in.

Sign-in is per tenant: ``/mcp/{tenant}`` is the tenant's MCP endpoint, and its metadata
``/.well-known/oauth-protected-resource/mcp/{tenant}`` names the authorization servers
that tenant advertises (``identity.issuers[].advertise``). An MCP client that gets a 401
from ``/mcp/{tenant}`` follows the ``resource_metadata`` URL of its ``WWW-Authenticate``
header there, signs in, and sends the token, which is accepted like on every route. The
documents of ``/mcp`` and of the root list no authorization server: a list made of every
tenant's issuers would let any tenant admin put its own sign-in page first for everyone
(``/mcp`` takes API keys, and tokens of any tenant). Public (no key); a tenant's document
reads its cached settings; a lookup that finds no sign-in (an unknown tenant) is charged
to the caller's failed-lookup budget like an unknown key (429 once spent).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from serve_app.api.deps import Svc
from serve_app.api.gate import MCP_PATH, METADATA_PATH, base_url
from serve_app.errors import ApiError

router = APIRouter(tags=["identity"])
Tenant = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]


def _document(base: str, resource: str, servers: list[str]) -> dict:
    return {
        "resource": base + resource,
        "authorization_servers": servers,
        "bearer_methods_supported": ["header"],
        "resource_name": "memserve",
        "resource_documentation": base + "/docs",
    }


@router.get(METADATA_PATH)
@router.get(METADATA_PATH + MCP_PATH)
async def protected_resource(request: Request, services: Svc) -> dict:
    tokens = services.auth.tokens
    if tokens is None:
        raise ApiError(404, "not_found", "token sign-in is not enabled")
    return _document(base_url(request.scope, tokens.s.public_url), MCP_PATH, [])


@router.get(METADATA_PATH + MCP_PATH + "/{tenant}")
async def tenant_protected_resource(tenant: Tenant, request: Request, services: Svc) -> dict:
    """The tenant's MCP endpoint and the issuers it advertises (none: an unknown tenant
    looks like one that advertises none)."""
    tokens = services.auth.tokens
    if tokens is None:
        raise ApiError(404, "not_found", "token sign-in is not enabled")
    client = request.scope.get("client")
    address = client[0] if client else None
    services.auth.failed_lookup_guard(address)
    eff = await services.tenants.effective(tenant)
    servers = list(dict.fromkeys(i.issuer for i in eff.issuers if i.advertise))
    if not servers:  # an unknown tenant, or one without sign-in: a stranger's lookup
        services.auth.failed_lookup(address)
    base = base_url(request.scope, tokens.s.public_url)
    return _document(base, f"{MCP_PATH}/{tenant}", servers)
