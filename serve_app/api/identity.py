"""OAuth protected resource metadata (RFC 9728) for ``/mcp``: where to sign in.

An MCP client that gets a 401 from ``/mcp`` follows the ``resource_metadata`` URL of its
``WWW-Authenticate`` header here and learns the authorization servers: the issuers that
tenants chose to advertise (``identity.issuers[].advertise``). A token from one of them,
for an audience its tenant trusts, is then accepted on ``/mcp`` as on every route. The
document is public (no key) and cached for a while, so asking costs no database work.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from serve_app.api.deps import Svc
from serve_app.api.gate import MCP_PATH, METADATA_PATH, base_url
from serve_app.errors import ApiError

router = APIRouter(tags=["identity"])


@router.get(METADATA_PATH)
@router.get(METADATA_PATH + MCP_PATH)
async def protected_resource(request: Request, services: Svc) -> dict:
    tokens = services.auth.tokens
    if tokens is None:
        raise ApiError(404, "not_found", "token sign-in is not enabled")
    base = base_url(request.scope, tokens.s.public_url)
    return {
        "resource": base + MCP_PATH,
        "authorization_servers": await tokens.advertised(),
        "bearer_methods_supported": ["header"],
        "resource_name": "memserve",
        "resource_documentation": base + "/docs",
    }
