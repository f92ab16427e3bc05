"""The replica's token verifier, built by the composition root."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from serve_app.identity.jwks import JwksCache, JwksFetcher
from serve_app.identity.verifier import TokenVerifier
from serve_app.services.tenants import TenantService
from serve_app.settings import IdentitySettings
from serve_app.store.issuers import IssuerIndex


def token_verifier(
    pool: AsyncConnectionPool, tenants: TenantService, s: IdentitySettings
) -> TokenVerifier:
    """The replica's verifier; its JWKS client is closed by ``verifier.jwks.fetcher.aclose``.

    What it caches from the tenants' settings is trusted only while their listener is
    healthy, and dropped whenever a tenant's settings change."""
    cache = tenants.cache
    verifier = TokenVerifier(
        IssuerIndex(pool),
        tenants.effective,
        JwksCache(JwksFetcher(s), s),
        s,
        trusted=(lambda: cache.enabled) if cache is not None else (lambda: False),
    )
    tenants.on_change.append(verifier.forget)
    return verifier
