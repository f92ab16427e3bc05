"""A tenant's trusted token issuers: the part of its settings document that says whose
signed tokens (JWTs) act as its end users.

An issuer is trusted for the audiences it lists; issuer + audience select the tenant
(migration 0020 keeps a unique index of the pairs, so a pair belongs to one tenant).
Only asymmetric algorithms are accepted: a shared secret would let anyone who can read
the published keys mint tokens (the "HS256 with the public key" attack), and ``none``
is never an algorithm. Inline JWKS hold public keys only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
ASYMMETRIC: frozenset[str] = frozenset(Algorithm.__args__)  # type: ignore[attr-defined]
MAX_ISSUERS = 16
MAX_INLINE_KEYS = 32
_PRINTABLE = r"^[^\x00-\x20\x7f]+$"  # one word: no spaces or control characters
_URL = r"^https?://[^\x00-\x20\x7f@#]+$"  # no userinfo, no fragment

IssuerUrl = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=_PRINTABLE)]
Audience = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=_PRINTABLE)]
ClaimName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:/\-]+$")
]
ScopeValue = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=_PRINTABLE)]
JwksUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=_URL)]
_KEY_TYPES = {"RSA", "EC", "OKP"}
_PRIVATE_PARTS = {"d", "p", "q", "dp", "dq", "qi", "oth", "k"}


class Issuer(BaseModel):
    """One trusted issuer of a tenant (``identity.issuers[]`` in the settings document)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    issuer: IssuerUrl  # matched exactly against the token's ``iss``
    audiences: list[Audience] = Field(min_length=1, max_length=16)  # one must be in ``aud``
    jwks_url: JwksUrl | None = None  # where its public keys are published
    jwks: dict[str, Any] | None = None  # or the keys themselves: {"keys": [...]}
    algorithms: list[Algorithm] = Field(
        default_factory=lambda: ["RS256", "ES256", "EdDSA"], min_length=1, max_length=9
    )
    user_claim: ClaimName = "sub"  # the claim that names the end user
    # Optional access mapping: the claim (a space-separated string or a list) whose values
    # grant read-write or read-only access; a token with neither is refused. Unset: every
    # token of this issuer may read and write.
    scope_claim: ClaimName | None = None
    write_scopes: list[ScopeValue] = Field(default_factory=list, max_length=32)
    read_scopes: list[ScopeValue] = Field(default_factory=list, max_length=32)
    max_lifetime_s: int = Field(86400, ge=60, le=7 * 86400)  # exp - iat at most this
    leeway_s: int = Field(30, ge=0, le=300)  # clock skew allowed on exp, nbf and iat
    advertise: bool = False  # list it in /.well-known/oauth-protected-resource (MCP sign-in)
    # Whose users its tokens name: True, the tenant's own user ids (its ``sub`` "alice" is
    # the tenant's user alice); False, users of this issuer alone ("<ref>:alice": another
    # issuer's "alice" is another user). Unset: True for the tenant's first issuer (every
    # entry of that issuer URL), False for the others, so adding an issuer never lets it
    # act as existing users.
    map_users: bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Issuer:
        if (self.jwks_url is None) == (self.jwks is None):
            raise ValueError("give exactly one of jwks_url and jwks")
        if self.jwks is not None:
            _check_inline(self.jwks)
        if self.jwks_url is not None:
            _check_fetchable(self.jwks_url)
        if self.scope_claim is not None and not (self.write_scopes or self.read_scopes):
            raise ValueError("scope_claim needs write_scopes or read_scopes")
        if self.scope_claim is None and (self.write_scopes or self.read_scopes):
            raise ValueError("write_scopes and read_scopes need scope_claim")
        if len(set(self.audiences)) != len(self.audiences):
            raise ValueError("an audience is listed twice")
        return self

    def with_primary(self, primary: bool) -> Issuer:
        """This entry with ``map_users`` decided (``primary``: the issuer URL of the
        tenant's first entry)."""
        if self.map_users is not None:
            return self
        return self.model_copy(update={"map_users": primary})

    def user_id(self, subject: str) -> str:
        """The tenant's user id of a token's user claim (``map_users``: see above)."""
        if self.map_users is not False:
            return subject
        ref = hashlib.sha256(self.issuer.encode()).hexdigest()[:12]
        return f"iss-{ref}:{subject}"

    def access(self, claims: dict[str, Any]) -> str | None:
        """'write', 'read' or None (no access) for verified ``claims``."""
        if self.scope_claim is None:
            return "write"
        raw = claims.get(self.scope_claim)
        if isinstance(raw, str):
            values = set(raw.split()[:64])
        elif isinstance(raw, list):
            values = {v for v in raw[:64] if isinstance(v, str)}
        else:
            return None
        if values & set(self.write_scopes):
            return "write"
        return "read" if values & set(self.read_scopes) else None


def _check_fetchable(url: str) -> None:
    """A ``jwks_url`` the HTTP client can send: refused here, where the tenant admin sees
    why, not at the first token of the issuer (a 500 that strangers could trigger)."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port out of range or not a number raises here
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise ValueError(f"jwks_url is not a URL that can be fetched: {exc}") from None
    if not parts.hostname:
        raise ValueError("jwks_url has no host")


def _check_inline(jwks: dict[str, Any]) -> None:
    keys = jwks.get("keys")
    if set(jwks) != {"keys"} or not isinstance(keys, list) or not keys:
        raise ValueError('jwks is {"keys": [...]} with at least one key')
    if len(keys) > MAX_INLINE_KEYS or len(json.dumps(jwks)) > 64_000:
        raise ValueError(f"jwks holds at most {MAX_INLINE_KEYS} keys (64 kB)")
    for key in keys:
        if not isinstance(key, dict) or key.get("kty") not in _KEY_TYPES:
            raise ValueError("every jwks key is a public RSA, EC or OKP key")
        if _PRIVATE_PARTS & set(key):
            raise ValueError("a jwks key holds private or symmetric parts: publish public keys")


class Identity(BaseModel):
    """The settings group of a tenant's trusted issuers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    issuers: list[Issuer] | None = Field(default=None, max_length=MAX_ISSUERS)

    @model_validator(mode="after")
    def _pairs_once(self) -> Identity:
        pairs = [(i.issuer, a) for i in self.issuers or () for a in i.audiences]
        if len(set(pairs)) != len(pairs):
            raise ValueError("an issuer and audience pair is listed twice")
        return self
