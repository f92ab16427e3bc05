"""The authenticator on a real database: fair buckets per end user, strangers cost nothing."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from serve_app.auth import TOKEN_PREFIX, Principal
from serve_app.db.pool import open_pool
from serve_app.errors import ApiError
from serve_app.services.auth import authenticator, key_store
from serve_app.settings import AuthSettings, Settings
from serve_app.store.keys import hash_key, seed_key


@pytest.fixture
async def auth(fresh_db):
    s = AuthSettings(
        rate_limit_per_s=5,
        rate_limit_burst=10,
        bad_key_per_s=1,
        bad_key_burst=3,
        negative_ttl_s=30,
        stranger_delay_s=0.2,
    )
    pool = await open_pool(fresh_db, Settings())
    keys, listener = key_store(pool, fresh_db, s)
    await asyncio.wait_for(listener.connected.wait(), 10)
    try:
        yield authenticator(keys, s), keys, fresh_db
    finally:
        await listener.stop()
        await pool.close()


async def created(keys, *args, **kwargs) -> tuple[str, dict]:
    """A new key, once this replica has heard of its INSERT (a lookup racing that
    notification is not cached, by design; the tests below need it cached)."""
    before = keys.cache.generation
    key, info = await keys.create(*args, **kwargs)
    deadline = time.monotonic() + 5
    while keys.cache.generation == before:
        assert time.monotonic() < deadline, "the INSERT notification never arrived"
        await asyncio.sleep(0.01)
    return key, info


async def test_one_flooding_end_user_leaves_the_others_untouched(auth):
    a, keys, _ = auth
    key, _ = await created(keys, "t", "service")
    caller = await a.principal(f"Bearer {key}")
    for _ in range(10):
        a.charge(caller, "flooder", 1.0)
    with pytest.raises(ApiError) as e:
        a.charge(caller, "flooder", 1.0)
    assert e.value.status == 429 and int(e.value.headers["Retry-After"]) >= 1
    for _ in range(10):
        a.charge(caller, "calm", 1.0)  # same key, another end user: its own bucket
    with pytest.raises(ApiError):
        a.charge(caller, "calm", 50.0)  # work, not requests: a big batch empties it


async def test_unknown_keys_are_cached_and_limited_per_address_before_the_database(auth):
    a, keys, dsn = auth
    cache = keys.cache
    for i in range(3):  # the address's budget for failed lookups
        with pytest.raises(ApiError) as e:
            await a.principal(f"Bearer msk_bad_{i}", "10.0.0.1")
        assert e.value.status == 401
    with pytest.raises(ApiError) as e:  # a fresh bad key: refused without a lookup
        await a.principal("Bearer msk_bad_new", "10.0.0.1")
    assert e.value.status == 429 and a.refused["bad_key_flood"] == 1
    with pytest.raises(ApiError) as e:  # a known-unknown key: 401 from the negative cache
        await a.principal("Bearer msk_bad_0", "10.0.0.1")
    assert e.value.status == 401 and cache.unknown_hits == 1
    with pytest.raises(ApiError) as e:  # another address still has its budget
        await a.principal("Bearer msk_bad_other", "10.0.0.2")
    assert e.value.status == 401
    # A key created later (even by another process) is forgotten as unknown at once.

    seed_key(dsn, "t", "service", "msk_bad_1", "late")
    deadline = time.monotonic() + 5
    while cache.is_unknown(hash_key("msk_bad_1")):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert (await a.principal("Bearer msk_bad_1", "10.0.0.3")).tenant_id == "t"


async def test_a_valid_cached_key_is_served_while_its_address_floods(auth):
    a, keys, _ = auth
    key, _ = await created(keys, "t", "user", user_id="u")
    await a.principal(f"Bearer {key}", "10.0.0.9")  # cached now
    for i in range(20):
        with pytest.raises(ApiError):
            await a.principal(f"Bearer msk_flood_{i}", "10.0.0.9")
    assert (await a.principal(f"Bearer {key}", "10.0.0.9")).user_id == "u"


async def test_revoked_key_is_refused_although_cached(auth):
    a, keys, dsn = auth
    key, info = await created(keys, "t", "service")
    await a.principal(f"Bearer {key}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s", (info["id"],))
    deadline = time.monotonic() + 5
    while True:
        try:
            await a.principal(f"Bearer {key}")
        except ApiError as e:
            assert e.status == 401
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("header", [None, "", "Basic xyz", "Bearer", "Bearer   ", "msk_no_scheme"])
async def test_missing_or_malformed_credentials_are_charged_like_bad_keys(auth, header):
    a, _, _ = auth
    for _ in range(3):  # the address's budget for failed lookups
        with pytest.raises(ApiError) as e:
            await a.principal(header, "10.0.3.1")
        assert e.value.status == 401
    with pytest.raises(ApiError) as e:  # spent: 429, as after three unknown keys
        await a.principal(header, "10.0.3.1")
    assert e.value.status == 429 and "Retry-After" in e.value.headers
    assert a.refused["no_key"] == 3 and a.refused["bad_key_flood"] == 1
    with pytest.raises(ApiError) as e:  # and an uncached key from there gets no lookup
        await a.principal("Bearer msk_after_no_key", "10.0.3.1")
    assert e.value.status == 429


async def test_token_buckets_are_the_tenants_own(auth):
    """Two tenants that trust the same issuer URL (other audiences) get the same token
    "key" id: one tenant's calls for its alice must not drain the other's alice."""
    authn, _, _ = auth
    key = TOKEN_PREFIX + "same-issuer-ref"
    a, b = Principal(key, "tenant-a", "user", "alice"), Principal(key, "tenant-b", "user", "alice")
    with pytest.raises(ApiError) as err:
        for _ in range(100):
            authn.charge(b, None, 1.0)
    assert err.value.status == 429
    authn.charge(a, None, 1.0)  # tenant A's alice still has her whole burst
