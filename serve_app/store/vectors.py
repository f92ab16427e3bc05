"""Per-model vector tables: ``memory_vectors_<slug>`` with an HNSW cosine index.

One table per embedding model so a new model (another dimension) is added and
back-filled without touching ``memory_items``.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

_SLUG = re.compile(r"^[a-z0-9_]{1,48}$")


def table_name(slug: str) -> str:
    if not _SLUG.match(slug):
        raise ValueError(f"invalid model slug {slug!r}")
    return f"memory_vectors_{slug}"


def ensure_table(dsn: str, slug: str, dim: int, *, m: int = 16, ef_construction: int = 64) -> str:
    """Create the model's vector table and indexes if missing; return its name."""
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
            conn.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {i} ON {t} USING hnsw (embedding vector_cosine_ops)"
                    " WITH (m = {m}, ef_construction = {ef})"
                ).format(
                    i=sql.Identifier(f"{name}_hnsw"),
                    t=ident,
                    m=sql.Literal(m),
                    ef=sql.Literal(ef_construction),
                )
            )
            conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, owner)").format(
                    i=sql.Identifier(f"{name}_owner"), t=ident
                )
            )
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%(name)s))", {"name": name})
    return name
