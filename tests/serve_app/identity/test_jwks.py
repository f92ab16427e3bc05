"""JWKS fetching and caching against a real local issuer over HTTP (no service needed)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from serve_app.identity.jwks import FetchRefused, JwksCache, JwksFetcher, parse_jwks
from serve_app.settings import IdentitySettings
from serve_app.testing.jwt_issuer import LocalIssuer


@pytest.fixture
def issuer():
    server = LocalIssuer().start()
    yield server
    server.stop()


def _settings(**kw) -> IdentitySettings:
    base = {"allow_private_jwks": True, "fetch_timeout_s": 1.0, "jwks_max_bytes": 64 * 1024}
    return IdentitySettings(**{**base, **kw})


async def _fetch(issuer: LocalIssuer, **kw):
    fetcher = JwksFetcher(_settings(**kw))
    try:
        return await fetcher.fetch(issuer.jwks_url)
    finally:
        await fetcher.aclose()


async def test_fetches_the_issuers_public_keys(issuer):
    keys = await _fetch(issuer)
    assert {k.kid for k in keys} == set(issuer.keys)
    assert {k.kty for k in keys} == {"RSA", "EC", "OKP"}


async def test_loopback_is_refused_unless_allowed_and_nothing_is_sent(issuer):
    with pytest.raises(FetchRefused, match="private or loopback"):
        await _fetch(issuer, allow_private_jwks=False)
    assert issuer.requests == 0


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://user:pw@127.0.0.1/x"])
async def test_only_plain_http_urls(url):
    fetcher = JwksFetcher(_settings())
    try:
        with pytest.raises(FetchRefused):
            await fetcher.fetch(url)
    finally:
        await fetcher.aclose()


async def test_an_endless_answer_is_cut_at_the_size_cap(issuer):
    issuer.mode = "huge"
    started = time.monotonic()
    with pytest.raises(FetchRefused, match="longer than"):
        await _fetch(issuer)
    assert time.monotonic() - started < 5
    time.sleep(0.2)
    assert issuer.huge_sent < 20 * 1024 * 1024  # the 50 MB were never all read


async def test_a_hanging_server_times_out(issuer):
    issuer.mode = "hang"
    started = time.monotonic()
    with pytest.raises(FetchRefused, match="no answer"):
        await _fetch(issuer, fetch_timeout_s=0.5)
    assert time.monotonic() - started < 2


async def test_an_error_status_is_refused(issuer):
    issuer.mode = "status"
    with pytest.raises(FetchRefused, match="HTTP 503"):
        await _fetch(issuer)


def test_private_and_symmetric_keys_are_skipped(issuer):
    jwks = issuer.jwks()
    jwks["keys"].append({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"})
    jwks["keys"].append({**jwks["keys"][0], "kid": "enc", "use": "enc"})
    assert {k.kid for k in parse_jwks(jwks)} == set(issuer.keys)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def jwks_cache(clock: Clock, interval_s: float) -> AsyncIterator[JwksCache]:
    s = _settings(refresh_min_interval_s=interval_s)
    cache = JwksCache(JwksFetcher(s), s, clock=clock)
    try:
        yield cache
    finally:
        await cache.fetcher.aclose()


async def test_unknown_kids_refetch_at_most_once_per_interval(issuer):
    clock = Clock()
    async with jwks_cache(clock, 30.0) as cache:
        kid = issuer.kid("RS256")
        assert await cache.key(issuer.jwks_url, None, kid, "RS256") is not None
        for n in range(200):  # a flood of random kids
            assert await cache.key(issuer.jwks_url, None, f"random-{n}", "RS256") is None
        assert issuer.requests == 1
        assert await cache.key(issuer.jwks_url, None, kid, "ES256") is None  # wrong key type
        issuer.rotate()  # the issuer rotates: its new kid is fetched after the interval
        new = issuer.kid("RS256")
        assert await cache.key(issuer.jwks_url, None, new, "RS256") is None
        clock.now += 31
        assert await cache.key(issuer.jwks_url, None, new, "RS256") is not None
        assert issuer.requests == 2
        issuer.mode = "status"  # a failing refresh keeps the keys it had
        clock.now += 10_000
        assert await cache.key(issuer.jwks_url, None, new, "RS256") is not None
        assert cache.failures == 1


async def test_a_withdrawn_key_moves_the_generation_on(issuer):
    clock = Clock()
    async with jwks_cache(clock, 1.0) as cache:
        old = issuer.kid("RS256")
        assert await cache.key(issuer.jwks_url, None, old, "RS256") is not None
        assert cache.generation == 0
        issuer.rotate()
        clock.now += 2
        assert await cache.key(issuer.jwks_url, None, issuer.kid("RS256"), "RS256") is not None
        assert cache.generation == 1
        assert await cache.key(issuer.jwks_url, None, old, "RS256") is None


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::a9fe:a9fe]/jwks",  # NAT64 of the cloud metadata address
        "http://[64:ff9b::7f00:1]/jwks",  # NAT64 of loopback
        "http://100.64.0.1/jwks",  # shared address space
        "http://[::1/jwks",  # a URL the client cannot parse (stored before it was checked)
    ],
)
async def test_private_or_broken_jwks_urls_are_refused_not_a_500(url):
    fetcher = JwksFetcher(_settings(allow_private_jwks=False))
    try:
        with pytest.raises(FetchRefused):
            await fetcher.fetch(url)
    finally:
        await fetcher.aclose()
