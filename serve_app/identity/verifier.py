"""A signed token (JWT) from a tenant's trusted issuer to the ``Principal`` it acts as.

The tenant comes from the token's ``iss`` and ``aud`` looked up in the index of trusted
issuers (migration 0020), never from any other claim; a token whose audiences select
more than one tenant is refused. The issuer's settings (its tenant's, cached and kept
fresh by NOTIFY) then decide: an asymmetric algorithm it allows, a key of its JWKS,
``iss``/``aud``/``exp``/``nbf``/``iat`` (PyJWT), a lifetime cap and leeway, and the
user claim, which must be a plain user id. The result acts exactly like a user key
bound to that user (rate-limit bucket per issuer and user, quotas, isolation); a
read-only scope is carried on the principal.

Verified tokens are remembered by their SHA-256 until their ``exp`` (at most
``verified_ttl_s``, dropped when the tenant's settings change or a JWKS refetch
withdraws a key), so a repeated token costs a hash; a token never seen costs one
signature check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
import re2

from serve_app.auth import TOKEN_PREFIX, Principal
from serve_app.identity.issuers import ASYMMETRIC, Issuer
from serve_app.identity.jwks import JwksCache
from serve_app.settings import IdentitySettings
from serve_app.store.issuers import IssuerIndex

_USER = re2.compile(r"^[A-Za-z0-9_.:\-][A-Za-z0-9_.:@\-]{0,127}$")  # schemas.Identifier, no '@'
_KID = re2.compile(r"^[A-Za-z0-9_.:=+/\-]{1,256}$")
MAX_AUDIENCES = 16
MAX_USER_CHARS = 128  # schemas.Identifier


class Refused(Exception):
    """Not a token we accept (the reason is for logs and counters, not the caller)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def looks_like_jwt(credential: str) -> bool:
    """A compact JWS (three dot-separated parts); API keys have no dots."""
    return credential.count(".") == 2


def issuer_ref(issuer: str) -> str:
    """A short stable name of an issuer for bucket keys and actors."""
    return hashlib.sha256(issuer.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Verified:
    principal: Principal
    until: float  # monotonic time the entry stops being used
    generation: int  # the JWKS cache's generation when verified (a withdrawn key: stale)


class TokenVerifier:
    def __init__(
        self,
        index: IssuerIndex,
        issuers: Callable[[str], Awaitable[Sequence[Issuer]]],
        jwks: JwksCache,
        s: IdentitySettings,
        *,
        clock: Callable[[], float] = time.time,
        trusted: Callable[[], bool] = lambda: True,
    ) -> None:
        self.index = index
        self.issuers = issuers  # a tenant's trusted issuers, in its settings' order
        self.jwks = jwks
        self.s = s
        self.clock = clock  # wall time: exp, nbf and iat are wall times
        self.trusted = trusted  # whether cached derivations may be used (the listener's)
        self._verified: OrderedDict[bytes, _Verified] = OrderedDict()
        self._tenants: OrderedDict[tuple[str, tuple[str, ...]], tuple[float, list[str]]] = (
            OrderedDict()
        )

    def forget(self, tenant_id: str) -> None:
        """A tenant's settings changed: nothing derived from any tenant's issuers stays."""
        self._verified.clear()
        self._tenants.clear()

    def cached(self, token: str) -> Principal | None:
        """The principal of a token verified before and still valid (no I/O, no crypto)."""
        digest = hashlib.sha256(token.encode()).digest()
        hit = self._verified.get(digest)
        if hit is None or not self.trusted():
            return None
        if time.monotonic() >= hit.until or hit.generation != self.jwks.generation:
            del self._verified[digest]
            return None
        return hit.principal

    async def verify(self, token: str, before_db: Callable[[], None]) -> Principal:
        """The principal ``token`` acts as, or :class:`Refused`.

        ``before_db`` runs before any lookup or signature check of an uncached token
        (the stranger budget: it may raise instead)."""
        if (hit := self.cached(token)) is not None:
            return hit
        if len(token) > self.s.max_token_chars:
            raise Refused("too_long")
        header, unverified = _peek(token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ASYMMETRIC:
            raise Refused("algorithm")  # none, HS*, anything unknown
        if kid is not None and (not isinstance(kid, str) or not _KID.match(kid)):
            raise Refused("kid")
        iss, auds = unverified.get("iss"), _audiences(unverified.get("aud"))
        if not isinstance(iss, str) or not iss or len(iss) > 512 or not auds:
            raise Refused("issuer")
        before_db()
        issuer, tenant_id = await self._issuer(iss, auds)
        if alg not in issuer.algorithms:
            raise Refused("algorithm")
        key = await self.jwks.key(issuer.jwks_url, issuer.jwks, kid, alg)
        if key is None:
            raise Refused("unknown_key")
        claims = self._decode(token, key, alg, issuer)
        principal = self._principal(claims, issuer, tenant_id)
        self._remember(token, principal, claims["exp"])
        return principal

    async def _issuer(self, iss: str, auds: tuple[str, ...]) -> tuple[Issuer, str]:
        tenants = await self._tenants_of(iss, auds)
        if len(tenants) != 1:  # unknown, or audiences of two tenants: refuse both
            raise Refused("issuer" if not tenants else "ambiguous_tenant")
        tenant_id = tenants[0]
        trusted = await self.issuers(tenant_id)
        for issuer in trusted:
            if issuer.issuer == iss and set(issuer.audiences) & set(auds):
                return issuer.with_primary(iss == trusted[0].issuer), tenant_id
        raise Refused("issuer")  # the index moved on meanwhile: fail closed

    async def _tenants_of(self, iss: str, auds: tuple[str, ...]) -> list[str]:
        key = (iss, auds)
        hit = self._tenants.get(key)
        now = time.monotonic()
        if hit is not None and now < hit[0] and self.trusted():
            return hit[1]
        tenants = await self.index.tenants(iss, auds)
        self._tenants[key] = (now + (60.0 if tenants else 10.0), tenants)
        while len(self._tenants) > self.s.issuers_cache_max:
            self._tenants.popitem(last=False)
        return tenants

    def _decode(self, token: str, key: Any, alg: str, issuer: Issuer) -> dict[str, Any]:
        now = self.clock()
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=issuer.audiences,
                issuer=issuer.issuer,
                leeway=issuer.leeway_s,
                options={"require": ["exp", "iat", "iss", "aud", issuer.user_claim]},
            )
        except jwt.PyJWTError as exc:
            raise Refused(type(exc).__name__) from None
        exp, iat = claims["exp"], claims["iat"]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (exp, iat)):
            raise Refused("times")
        if iat > now + issuer.leeway_s:
            raise Refused("issued_in_future")
        if exp - iat > issuer.max_lifetime_s or exp - now > issuer.max_lifetime_s:
            raise Refused("lifetime")
        return claims

    def _principal(self, claims: dict[str, Any], issuer: Issuer, tenant_id: str) -> Principal:
        user = claims.get(issuer.user_claim)
        if not isinstance(user, str) or not _USER.match(user):
            raise Refused("user_claim")  # not a plain user id: '@org', 10 kB, NUL, ...
        user = issuer.user_id(user)
        if len(user) > MAX_USER_CHARS:
            raise Refused("user_claim")  # namespaced past an identifier's length
        access = issuer.access(claims)
        if access is None:
            raise Refused("scope")
        return Principal(
            TOKEN_PREFIX + issuer_ref(issuer.issuer),
            tenant_id,
            "user",
            user,
            read_only=access == "read",
        )

    def _remember(self, token: str, principal: Principal, exp: float) -> None:
        if self.s.verified_cache_max <= 0 or self.s.verified_ttl_s <= 0:
            return
        left = min(float(exp) - self.clock(), self.s.verified_ttl_s)
        if left <= 0:
            return
        digest = hashlib.sha256(token.encode()).digest()
        until = time.monotonic() + left
        self._verified[digest] = _Verified(principal, until, self.jwks.generation)
        while len(self._verified) > self.s.verified_cache_max:
            self._verified.popitem(last=False)


def _peek(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims, unverified: only to find the issuer, key and algorithm.

    One cheap decode (PyJWT's own parse checks every character in Python, ~45 us a
    time); whatever this lets through is parsed strictly and verified by ``jwt.decode``.
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise Refused("malformed")
    try:
        header, claims = (json.loads(_unb64(part)) for part in parts[:2])
    except (ValueError, binascii.Error, RecursionError):  # nested past the decoder's stack
        raise Refused("malformed") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise Refused("malformed")
    return header, claims


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _audiences(aud: Any) -> tuple[str, ...]:
    if isinstance(aud, str):
        return (aud,) if aud else ()
    if (
        isinstance(aud, list)
        and 0 < len(aud) <= MAX_AUDIENCES
        and all(isinstance(a, str) and a for a in aud)
    ):
        return tuple(sorted(set(aud)))
    return ()
