"""The token verifier on its own: the issuer index is a plain stand-in (the real one is
SQL over migration 0020, exercised by the e2e and security suites), keys are inline."""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence

import jwt
import pytest

from serve_app.identity.issuers import Issuer
from serve_app.identity.jwks import JwksCache, JwksFetcher
from serve_app.identity.verifier import Refused, TokenVerifier
from serve_app.settings import IdentitySettings
from serve_app.tenant_settings import resolve
from serve_app.testing.jwt_issuer import LocalIssuer


class Index:
    """(issuer, audience) -> tenant, as ``trusted_issuers`` holds them."""

    def __init__(self, pairs: dict[tuple[str, str], str]) -> None:
        self.pairs = pairs
        self.asked = 0

    async def tenants(self, issuer: str, audiences: Sequence[str]) -> list[str]:
        self.asked += 1
        return sorted({t for (i, a), t in self.pairs.items() if i == issuer and a in audiences})


@pytest.fixture
def issuer():
    server = LocalIssuer()  # never started: its keys are inline
    yield server
    server.server.server_close()


@pytest.fixture
def verifier(issuer):
    entries = {
        "acme": [
            {
                "issuer": issuer.issuer,
                "audiences": ["acme"],
                "jwks": issuer.jwks(),
                "max_lifetime_s": 3600,
            },
            {
                "issuer": issuer.issuer,
                "audiences": ["acme-ro"],
                "jwks": issuer.jwks(),
                "scope_claim": "scope",
                "write_scopes": ["w"],
                "read_scopes": ["r"],
            },
        ],
        "beta": [{"issuer": issuer.issuer, "audiences": ["beta"], "jwks": issuer.jwks()}],
    }
    settings = {t: resolve({"identity": {"issuers": e}}, {}) for t, e in entries.items()}

    async def issuers(tenant: str) -> tuple[Issuer, ...]:
        return settings[tenant].issuers

    pairs = {(issuer.issuer, a): t for t, e in entries.items() for i in e for a in i["audiences"]}
    s = IdentitySettings()
    return TokenVerifier(Index(pairs), issuers, JwksCache(JwksFetcher(s), s), s)


def _nothing() -> None:
    pass


async def test_a_valid_token_is_a_user_of_the_tenant_its_issuer_and_audience_name(verifier, issuer):
    for alg in ("RS256", "ES256", "EdDSA"):
        p = await verifier.verify(issuer.token("ann", "acme", alg=alg, tenant="beta"), _nothing)
        assert (p.tenant_id, p.role, p.user_id, p.read_only) == ("acme", "user", "ann", False)
        assert p.via_token and p.actor.startswith("user:token:")
    p = await verifier.verify(issuer.token("ann", "acme-ro", scope="openid r"), _nothing)
    assert p.read_only


async def test_a_verified_token_is_remembered_until_settings_change(verifier, issuer):
    token = issuer.token("ann", "acme")
    await verifier.verify(token, _nothing)
    asked = verifier.index.asked
    assert verifier.cached(token) is not None
    await verifier.verify(token, lambda: pytest.fail("a cached token costs no lookup"))
    verifier.forget("acme")
    assert verifier.cached(token) is None
    await verifier.verify(token, _nothing)
    assert verifier.index.asked == asked + 1


def _refusals(issuer: LocalIssuer) -> dict[str, str]:
    now = int(time.time())
    good = issuer.claims("ann", "acme")
    return {
        "algorithm": jwt.encode(good, "s" * 32, algorithm="HS256"),
        "malformed": "a.b.c",
        "issuer": issuer.sign({**good, "iss": "https://other"}),
        "ambiguous_tenant": issuer.sign({**good, "aud": ["acme", "beta"]}),
        "lifetime": issuer.sign({**good, "exp": now + 7200}),
        "ImmatureSignatureError": issuer.sign({**good, "iat": now + 600, "exp": now + 900}),
        "ExpiredSignatureError": issuer.sign({**good, "iat": now - 900, "exp": now - 600}),
        "MissingRequiredClaimError": issuer.sign({k: v for k, v in good.items() if k != "iat"}),
        "user_claim": issuer.sign({**good, "sub": "@org"}),
        "scope": issuer.sign({**issuer.claims("ann", "acme-ro"), "scope": "openid"}),
        "unknown_key": issuer.sign(good, kid="nope"),
        "kid": issuer.sign(good, kid="../x y"),
    }


async def test_each_refusal_names_its_reason(verifier, issuer):
    for reason, token in _refusals(issuer).items():
        with pytest.raises(Refused) as refused:
            await verifier.verify(token, _nothing)
        assert refused.value.reason == reason, (reason, refused.value.reason)


async def test_the_stranger_budget_is_asked_before_any_lookup(verifier, issuer):
    class OutOfBudget(Exception):
        pass

    def spent() -> None:
        raise OutOfBudget

    with pytest.raises(OutOfBudget):
        await verifier.verify(issuer.token("ann", "acme"), spent)
    assert verifier.index.asked == 0


async def test_a_second_issuer_names_users_of_its_own(issuer):
    """A partner issuer added after the tenant's own may not act as the tenant's existing
    users: its "alice" is another user, unless the tenant maps its users explicitly."""
    partner, mapped = LocalIssuer(), LocalIssuer()  # other ports: other issuer URLs
    entries = [
        {"issuer": issuer.issuer, "audiences": ["acme"], "jwks": issuer.jwks()},
        {"issuer": partner.issuer, "audiences": ["acme"], "jwks": partner.jwks()},
        {"issuer": mapped.issuer, "audiences": ["acme"], "jwks": mapped.jwks(), "map_users": True},
    ]
    settings = resolve({"identity": {"issuers": entries}}, {})

    async def issuers(tenant: str) -> tuple[Issuer, ...]:
        return settings.issuers

    pairs = {(e["issuer"], "acme"): "acme" for e in entries}
    s = IdentitySettings()
    v = TokenVerifier(Index(pairs), issuers, JwksCache(JwksFetcher(s), s), s)
    own = await v.verify(issuer.token("alice", "acme"), _nothing)
    theirs = await v.verify(partner.token("alice", "acme"), _nothing)
    shared = await v.verify(mapped.token("alice", "acme"), _nothing)
    assert own.user_id == "alice" and shared.user_id == "alice"
    assert theirs.user_id != "alice" and theirs.user_id.endswith(":alice")
    assert theirs.user_id == (await v.verify(partner.token("alice", "acme"), _nothing)).user_id
    for server in (partner, mapped):
        server.server.server_close()


async def test_a_header_nested_past_the_decoder_is_refused_not_a_crash(verifier):
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    nested = b64(b"[" * 2000 + b"]" * 2000)  # under max_token_chars, past the stack
    with pytest.raises(Refused) as err:
        await verifier.verify(f"{nested}.{b64(b'{}')}.sig", _nothing)
    assert err.value.reason == "malformed"
