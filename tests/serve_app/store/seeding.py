"""Memories inserted directly (id, content, a constant vector): for tests of the jobs
around the writer (forget, re-embed), where the writer itself is not under test."""

from __future__ import annotations

from serve_app.store.vectors import table_name


async def run(pool, query: str, *params) -> list[dict]:
    """One statement on a pooled connection; its rows (none for a command)."""
    async with pool.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def seed_memories(pool, slug: str, dim: int, user: str, n: int, tenant: str = "t1") -> None:
    """``n`` memories "seeded 1".."seeded n" of ``user`` with vectors in ``slug``'s table."""
    await run(
        pool,
        f"WITH ins AS (INSERT INTO memory_items (id, tenant_id, user_id, type, content,"
        f" dedupe_hash) SELECT gen_random_uuid(), %s, %s, 'fact', 'seeded ' || g,"
        f" md5('seeded ' || g) FROM generate_series(1, %s) g RETURNING id, tenant_id, owner)"
        f" INSERT INTO {table_name(slug)} (item_id, tenant_id, owner, embedding)"
        f" SELECT id, tenant_id, owner, array_fill(0.05, ARRAY[{int(dim)}])::real[]::vector"
        f" FROM ins",
        tenant,
        user,
        n,
    )
