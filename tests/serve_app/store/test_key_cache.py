"""Cached key lookups: revocations are seen at once, and nothing is trusted unheard."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from serve_app.db.listener import NotifyListener
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.key_cache import KEYS_CHANNEL, KeyCache
from serve_app.store.keys import KeyStore, hash_key

ROW = {"id": "k1", "tenant_id": "t", "role": "service", "user_id": None}


def test_untrusted_cache_holds_nothing():
    cache = KeyCache(60, 10)  # no listener: never trusted
    cache.put("h", ROW, cache.token())
    assert cache.get("h") is None and len(cache) == 0


def test_ttl_lru_and_generations():
    cache = KeyCache(60, 2, trusted=lambda: True, negative_ttl_s=60)
    cache.put("a", ROW, cache.token())
    assert cache.get("a") == ROW
    stale = cache.token()
    cache.drop("zzz")  # a revocation arrived while "b" was being read
    cache.put("b", ROW, stale)
    assert cache.get("b") is None
    before_insert = cache.token()
    cache.drop("new:yyy")  # another key's INSERT cannot make "b" stale: still cached
    cache.put("b", ROW, before_insert)
    assert cache.get("b") == ROW
    cache.put_unknown("u", before_insert)  # ...but the INSERT may have been "u" itself
    assert not cache.is_unknown("u")
    cache.put_unknown("u", cache.token())
    assert cache.is_unknown("u")
    cache.put("c", ROW, cache.token())  # over max_entries: "a" (least recent) goes
    assert cache.get("a") is None and cache.get("c") == ROW
    short = KeyCache(0.05, 10, trusted=lambda: True)
    short.put("x", ROW, short.token())
    time.sleep(0.1)
    assert short.get("x") is None


async def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.fixture
async def keys(fresh_db):
    cache = KeyCache(60, 100)
    listener = NotifyListener(fresh_db, KEYS_CHANNEL, cache.drop, on_connect=cache.clear)
    cache.trusted = listener.connected.is_set
    listener.start()
    await asyncio.wait_for(listener.connected.wait(), 10)
    pool = await open_pool(fresh_db, Settings())
    try:
        yield KeyStore(pool, cache), cache, listener, fresh_db
    finally:
        await listener.stop()
        await pool.close()


async def test_revocation_elsewhere_reaches_the_cache(keys):
    store, cache, listener, dsn = keys
    key, info = await store.create("t", "service", name="k")
    await _until(lambda: listener.received >= 1)  # the INSERT's own notification
    assert (await store.lookup(key))["id"] == info["id"]
    assert (await store.lookup(key))["id"] == info["id"]
    assert cache.hits == 1
    # Another replica (or an operator in psql) revokes it: the trigger notifies us.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s", (info["id"],))
    await _until(lambda: hash_key(key) not in cache._rows)
    assert await store.lookup(key) is None
    assert await store.lookup("msk_unknown") is None and len(cache) == 0


async def test_local_revoke_is_immediate_and_deleted_keys_drop(keys):
    store, cache, _, dsn = keys
    key, info = await store.create("t", "user", user_id="u1")
    key2, info2 = await store.create("t", "service")
    assert await store.lookup(key) and await store.lookup(key2)
    assert await store.revoke("t", info["id"]) is True
    assert await store.lookup(key) is None  # no wait for the notification
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM api_keys WHERE id = %s", (info2["id"],))
    await _until(lambda: hash_key(key2) not in cache._rows)
    assert await store.lookup(key2) is None


async def test_without_listener_every_lookup_reads_the_database(keys):
    store, cache, listener, dsn = keys
    key, info = await store.create("t", "service")
    await listener.stop()  # e.g. its connection dropped: notifications may be missed
    assert await store.lookup(key) is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE id = %s", (info["id"],))
    assert await store.lookup(key) is None
    assert cache.hits == 0 and len(cache) == 0
