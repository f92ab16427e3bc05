"""Shard keys: which retriever replica should hold a user's cache entries.

The key is the Serve multiplexed model id, so requests for one user keep landing on
the replica whose cache is warm for them. Deterministic across processes (crc32,
not Python's salted ``hash``).
"""

from __future__ import annotations

import zlib

from serve_app.retrieval.query import SearchQuery


def shard_of(tenant_id: str, user_id: str, shards: int) -> str:
    n = zlib.crc32(f"{tenant_id}\x00{user_id}".encode()) % max(shards, 1)
    return f"shard-{n}"


def shard_key(q: SearchQuery, shards: int) -> str:
    return shard_of(q.tenant_id, q.user_id, shards)
