"""A tenant's issuer entries are validated when they are written, not at the first
token: a JWKS URL the service cannot fetch is refused with the reason."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serve_app.identity.issuers import Identity, Issuer

BASE = {"issuer": "https://id.example.com/", "audiences": ["memserve"]}


@pytest.mark.parametrize(
    "url",
    ["http://[::1/jwks", "https://id.example.com:99999/jwks", "https://:443/jwks", "http://[]/"],
)
def test_a_jwks_url_the_client_cannot_fetch_is_refused_at_registration(url):
    with pytest.raises(ValidationError, match="jwks_url"):
        Issuer.model_validate({**BASE, "jwks_url": url})
    with pytest.raises(ValidationError):
        Identity.model_validate({"issuers": [{**BASE, "jwks_url": url}]})


@pytest.mark.parametrize(
    "url", ["https://id.example.com/.well-known/jwks.json", "http://127.0.0.1:8080/jwks"]
)
def test_fetchable_jwks_urls_are_kept(url):
    assert Issuer.model_validate({**BASE, "jwks_url": url}).jwks_url == url
