"""API keys: stored as SHA-256 hashes, bound to a tenant and a role."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from serve_app.store.key_cache import KeyCache
from serve_app.store.records import column_list

KEY_PREFIX = "msk_"
MAX_KEY_CHARS = 512  # generated keys have 47; configured ones are the operator's choice
# What may be shown about a key: never key_hash (nor the key, which is not stored).
KEY_INFO_COLUMNS: tuple[str, ...] = (
    "id",
    "tenant_id",
    "role",
    "user_id",
    "prefix",
    "name",
    "rate_limit_per_s",
    "created_at",
    "revoked_at",
)
_INFO = column_list(KEY_INFO_COLUMNS)


def hash_key(key: str) -> str:
    # Keys are 256-bit random tokens, so a fast hash is enough (no dictionary to attack).
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _insert(
    key: str,
    tenant_id: str,
    role: str,
    user_id: str | None,
    name: str | None,
    tail: str,
    rate_limit_per_s: float | None = None,
    created_by: str | None = None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """The INSERT of a new api_keys row (then ``tail``): only the key's hash is stored."""
    query = sql.SQL(
        "INSERT INTO api_keys (id, tenant_id, role, user_id, key_hash, prefix, name,"
        " rate_limit_per_s, created_by) VALUES (%(id)s, %(tenant_id)s, %(role)s,"
        " %(user_id)s, %(key_hash)s, %(prefix)s, %(name)s, %(rate_limit_per_s)s,"
        " %(created_by)s) {tail}"
    ).format(tail=sql.SQL(tail).format(info=_INFO))
    params = {
        "id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "role": role,
        "user_id": user_id,
        "key_hash": hash_key(key),
        "prefix": key[:12],
        "name": name,
        "rate_limit_per_s": rate_limit_per_s,
        "created_by": created_by,
    }
    return query, params


class KeyStore:
    def __init__(self, pool: AsyncConnectionPool, cache: KeyCache | None = None) -> None:
        self.pool = pool
        self.cache = cache

    async def lookup(
        self, key: str, before_db: Callable[[], None] | None = None
    ) -> dict[str, Any] | None:
        """The active key's row, or None (unknown or revoked).

        ``before_db`` runs only when the answer is not cached, right before the
        database is asked (the place for a limit that may raise instead).
        """
        if len(key) > MAX_KEY_CHARS:
            return None  # no key is that long: not worth a lookup
        key_hash = hash_key(key)
        cache = self.cache
        if cache is not None:
            if (row := cache.get(key_hash)) is not None:
                return row
            if cache.is_unknown(key_hash):
                return None
        if before_db is not None and not (cache is not None and cache.known(key_hash)):
            before_db()
        token = cache.token() if cache is not None else (0, 0)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, tenant_id, role, user_id, rate_limit_per_s FROM api_keys"
                " WHERE key_hash = %(key_hash)s AND revoked_at IS NULL",
                {"key_hash": key_hash},
            )
            row = await cur.fetchone()
        if cache is not None:
            if row is not None:
                cache.put(key_hash, row, token)
            else:
                cache.put_unknown(key_hash, token)
        return row

    async def create(
        self,
        tenant_id: str,
        role: str,
        user_id: str | None = None,
        name: str | None = None,
        rate_limit_per_s: float | None = None,
        created_by: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        key = generate_key()
        query, params = _insert(
            key, tenant_id, role, user_id, name, "RETURNING {info}", rate_limit_per_s, created_by
        )
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return key, await cur.fetchone()

    async def list(self, tenant_id: str) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL(
                    "SELECT {info} FROM api_keys WHERE tenant_id = %(tenant_id)s"
                    " ORDER BY created_at, id"
                ).format(info=_INFO),
                {"tenant_id": tenant_id},
            )
            return await cur.fetchall()

    async def revoke(self, tenant_id: str, key_id: uuid.UUID) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE api_keys SET revoked_at = now()"
                " WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND revoked_at IS NULL"
                " RETURNING key_hash",
                {"id": key_id, "tenant_id": tenant_id},
            )
            row = await cur.fetchone()
        if row is not None and self.cache is not None:
            self.cache.drop(row["key_hash"])  # here at once; other replicas via NOTIFY
        return row is not None


def seed_key(
    dsn: str, tenant_id: str, role: str, key: str, name: str, user_id: str | None = None
) -> bool:
    """Register a configured key (bootstrap/admin) if absent; True when it was added now."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(
            *_insert(key, tenant_id, role, user_id, name, "ON CONFLICT (key_hash) DO NOTHING")
        )
        return cur.rowcount > 0


def ever_had_service_key(dsn: str, tenant_id: str) -> bool:
    """Whether the tenant ever had a service key, revoked or deleted ones included."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM tenant_service_key_seen WHERE tenant_id = %(tenant_id)s",
            {"tenant_id": tenant_id},
        ).fetchone()
        return row is not None


def has_key(dsn: str, tenant_id: str, role: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM api_keys WHERE tenant_id = %(tenant_id)s AND role = %(role)s"
            " AND revoked_at IS NULL",
            {"tenant_id": tenant_id, "role": role},
        ).fetchone()
        return row is not None
