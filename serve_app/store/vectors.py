"""Per-model vector tables: ``memory_vectors_<slug>``, an owner btree and, if asked, a
global HNSW cosine index.

One table per embedding model so a new model (another dimension) is added and
back-filled without touching ``memory_items``. Every vector query is per owner, so
the owner btree serves them all exactly; the HNSW index only helps owners too big
for an exact scan while they are not in the Retriever's hot cache, and every insert
pays for it (``MEMSERVE_PG_HNSW``, loadtests/bench_insert.py).
"""

from __future__ import annotations

import psycopg
import re2
from psycopg import sql

_SLUG = re2.compile(r"^[a-z0-9_]{1,48}$")


def table_name(slug: str) -> str:
    if not _SLUG.match(slug):
        raise ValueError(f"invalid model slug {slug!r}")
    return f"memory_vectors_{slug}"


def ensure_table(dsn: str, slug: str, dim: int, *, hnsw: tuple[int, int] | None = None) -> str:
    """Create the model's vector table and owner index if missing; return its name.

    ``hnsw`` (``m``, ``ef_construction``): build the HNSW index if missing; None: drop
    it if an earlier start made one (the setting says what exists)."""
    name = table_name(slug)
    ident = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%(name)s))", {"name": name})
        try:
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {t} ("
                    " item_id uuid PRIMARY KEY REFERENCES memory_items(id) ON DELETE CASCADE,"
                    " tenant_id text NOT NULL, owner text NOT NULL,"
                    " embedding vector({dim}) NOT NULL)"
                ).format(t=ident, dim=sql.Literal(dim))
            )
            hnsw_index = sql.Identifier(f"{name}_hnsw")
            if hnsw is None:
                conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(hnsw_index))
            else:
                conn.execute(
                    sql.SQL(
                        "CREATE INDEX IF NOT EXISTS {i} ON {t}"
                        " USING hnsw (embedding vector_cosine_ops)"
                        " WITH (m = {m}, ef_construction = {ef})"
                    ).format(i=hnsw_index, t=ident, m=sql.Literal(hnsw[0]), ef=sql.Literal(hnsw[1]))
                )
            conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, owner)").format(
                    i=sql.Identifier(f"{name}_owner"), t=ident
                )
            )
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%(name)s))", {"name": name})
    return name
