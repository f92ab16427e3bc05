"""An issuer's public keys (JWKS): fetched safely, cached per JWKS, refreshed sparingly.

A JWKS URL is a tenant admin's say-so, so the fetch is an outbound request a stranger
may be able to trigger: it resolves the host first and refuses private, loopback and
link-local addresses unless the operator allows them (SSRF), then connects to the
address it checked (no second resolution a rebinding DNS could answer differently;
TLS still verifies the host name), follows no redirects, reads at most
``jwks_max_bytes`` and gives up after ``fetch_timeout_s`` in all. Any failure is "no
keys", which the verifier turns into a 401, never a hang or a 500.

Cached keys are used until ``jwks_ttl_s``; a token naming a ``kid`` the cache lacks
refetches at most once per ``refresh_min_interval_s`` per JWKS (a flood of random kids
costs no outbound fetches beyond that), and a failed refetch keeps the old keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from serve_app.settings import IdentitySettings
from serve_app.webhooks.ssrf import TargetGuard

log = logging.getLogger(__name__)
MAX_KEYS = 100  # keys taken from one JWKS
# Which key types sign which algorithms (a key of another type is never tried).
KEY_TYPES = {
    "RS256": "RSA",
    "RS384": "RSA",
    "RS512": "RSA",
    "PS256": "RSA",
    "PS384": "RSA",
    "PS512": "RSA",
    "ES256": "EC",
    "ES384": "EC",
    "EdDSA": "OKP",
}
_CURVES = {"ES256": {"P-256"}, "ES384": {"P-384"}, "EdDSA": {"Ed25519", "Ed448"}}


class FetchRefused(Exception):
    """The JWKS could not be fetched or read (the reason is logged, never shown)."""


@dataclass(frozen=True)
class Jwk:
    kid: str | None
    kty: str
    alg: str | None
    crv: str | None
    key: Any  # the cryptography public key object PyJWT verifies with

    def signs(self, alg: str) -> bool:
        if KEY_TYPES.get(alg) != self.kty or (self.alg is not None and self.alg != alg):
            return False
        return alg not in _CURVES or self.crv in _CURVES[alg]


def parse_jwks(doc: Any) -> list[Jwk]:
    """The usable public signing keys of a JWKS document (others are skipped)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise FetchRefused("not a JWKS document")
    out: list[Jwk] = []
    for raw in doc["keys"][:MAX_KEYS]:
        if not isinstance(raw, dict) or raw.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if raw.get("use", "sig") != "sig" or "d" in raw:
            continue  # an encryption key, or a private one published by mistake
        kid, alg = raw.get("kid"), raw.get("alg")
        if (kid is not None and not isinstance(kid, str)) or alg not in (None, *KEY_TYPES):
            continue
        try:
            key = PyJWK(raw, algorithm=alg or _default_alg(raw)).key
        except (PyJWKError, ValueError, TypeError, KeyError):
            continue
        out.append(Jwk(kid, raw["kty"], alg, raw.get("crv"), key))
    return out


def _default_alg(raw: dict[str, Any]) -> str:
    if raw["kty"] == "RSA":
        return "RS256"
    if raw["kty"] == "OKP":
        return "EdDSA"
    return {"P-256": "ES256", "P-384": "ES384"}.get(raw.get("crv"), "ES256")


# The one judgement of "public" that webhooks and document fetches use too (the IANA
# special-purpose blocks, IPv4 carried in IPv6: NAT64, 6to4, Teredo, mapped).
_GUARD = TargetGuard()


def _public(address: str) -> bool:
    return _GUARD.allowed_address(ipaddress.ip_address(address.split("%", 1)[0]))


class JwksFetcher:
    """One GET of a JWKS URL under the SSRF, size and time limits."""

    def __init__(self, s: IdentitySettings, client: httpx.AsyncClient | None = None) -> None:
        self.s = s
        self.client = client or httpx.AsyncClient(
            follow_redirects=False, trust_env=False, timeout=s.fetch_timeout_s
        )
        self.gate = asyncio.Semaphore(s.max_concurrent_fetches)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def fetch(self, url: str) -> list[Jwk]:
        try:
            async with asyncio.timeout(self.s.fetch_timeout_s), self.gate:
                return parse_jwks(json.loads(await self._get(httpx.URL(url))))
        except TimeoutError:
            raise FetchRefused(f"{url}: no answer within {self.s.fetch_timeout_s} s") from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError, UnicodeError) as exc:
            # InvalidURL: an entry stored before jwks_url was checked at registration
            raise FetchRefused(f"{url}: {type(exc).__name__}: {exc}") from None

    async def _get(self, url: httpx.URL) -> bytes:
        if url.scheme not in ("http", "https") or not url.host or url.userinfo:
            raise FetchRefused(f"{url}: not a plain http(s) URL")
        port = url.port or (443 if url.scheme == "https" else 80)
        infos = await asyncio.get_running_loop().getaddrinfo(
            url.host, port, type=socket.SOCK_STREAM
        )
        addresses = [info[4][0] for info in infos]
        if not addresses:
            raise FetchRefused(f"{url}: the host does not resolve")
        if not self.s.allow_private_jwks and not all(_public(a) for a in addresses):
            raise FetchRefused(f"{url}: resolves to a private or loopback address (refused)")
        host_header = url.netloc.decode("ascii")
        pinned = url.copy_with(host=addresses[0])  # the address checked, not a new lookup
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        request = self.client.build_request(
            "GET",
            pinned,
            headers={"Host": host_header, "Accept": "application/json"},
            extensions=extensions,
        )
        response = await self.client.send(request, stream=True)
        try:
            if response.status_code != 200:
                raise FetchRefused(f"{url}: HTTP {response.status_code}")
            declared = response.headers.get("content-length")
            limit = self.s.jwks_max_bytes
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise FetchRefused(f"{url}: {declared} bytes is more than allowed")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self.s.jwks_max_bytes:
                    raise FetchRefused(f"{url}: answer longer than {self.s.jwks_max_bytes} bytes")
            return bytes(body)
        finally:
            await response.aclose()


@dataclass
class _Entry:
    keys: list[Jwk] = field(default_factory=list)
    fetched_at: float | None = None  # last successful fetch
    tried_at: float | None = None  # last attempt, successful or not
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class JwksCache:
    """Keys per JWKS (a URL, or an inline document), bounded LRU."""

    def __init__(
        self,
        fetcher: JwksFetcher,
        s: IdentitySettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fetcher = fetcher
        self.s = s
        self.clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.fetches = 0  # outbound fetches attempted (tests, the bench)
        self.failures = 0
        # Bumped when a refetch drops a key: tokens verified with it are checked again.
        self.generation = 0

    async def key(
        self, jwks_url: str | None, inline: dict[str, Any] | None, kid: str | None, alg: str
    ) -> Any | None:
        """The public key that may have signed a token (its ``kid`` and ``alg``), or None."""
        if inline is not None:
            digest = hashlib.sha256(json.dumps(inline, sort_keys=True).encode()).hexdigest()
            source = "inline:" + digest
        else:
            source = jwks_url or ""
        entry = self._entry(source)
        if entry.fetched_at is None and inline is not None:
            entry.keys, entry.fetched_at = parse_jwks(inline), self.clock()
        found = _pick(entry.keys, kid, alg)
        if inline is not None or jwks_url is None:
            return found
        now = self.clock()
        fresh = entry.fetched_at is not None and now - entry.fetched_at < self.s.jwks_ttl_s
        if found is not None and fresh:
            return found
        if entry.tried_at is not None and now - entry.tried_at < self.s.refresh_min_interval_s:
            return found  # refreshed lately: a stale key still serves, an unknown kid does not
        async with entry.lock:  # one fetch per JWKS at a time; the others wait for it
            since = None if entry.tried_at is None else self.clock() - entry.tried_at
            if since is None or since >= self.s.refresh_min_interval_s:
                await self._refresh(jwks_url, entry)
        return _pick(entry.keys, kid, alg)

    async def _refresh(self, url: str, entry: _Entry) -> None:
        entry.tried_at = self.clock()
        self.fetches += 1
        try:
            keys = await self.fetcher.fetch(url)
            if {(k.kid, k.kty) for k in entry.keys} - {(k.kid, k.kty) for k in keys}:
                self.generation += 1  # a key was withdrawn
            entry.keys, entry.fetched_at = keys, self.clock()
        except FetchRefused as exc:
            self.failures += 1
            log.warning("JWKS fetch failed, keeping %d cached keys: %s", len(entry.keys), exc)

    def _entry(self, source: str) -> _Entry:
        entry = self._entries.get(source)
        if entry is None:
            entry = self._entries[source] = _Entry()
            while len(self._entries) > self.s.issuers_cache_max:
                self._entries.popitem(last=False)
        self._entries.move_to_end(source)
        return entry


def _pick(keys: list[Jwk], kid: str | None, alg: str) -> Any | None:
    """The key named by ``kid`` that signs ``alg``; without a kid, the only key that does."""
    if kid is not None:
        return next((k.key for k in keys if k.kid == kid and k.signs(alg)), None)
    usable = [k for k in keys if k.signs(alg)]
    return usable[0].key if len(usable) == 1 else None
