"""Per-model vector tables: ``memory_vectors_<slug>``, an owner btree and, if asked, a
global HNSW cosine index and a partial one over the shared owners.

One table per embedding model so a new model (another dimension) is added and
back-filled without touching ``memory_items``. Every vector query is per owner, so
the owner btree serves them all exactly; the HNSW index only helps owners too big
for an exact scan while they are not in the Retriever's hot cache, and every insert
pays for it (``MEMSERVE_PG_HNSW``, loadtests/bench_insert.py).

Shared owners (``@org``, ``@agent:<id>``) hold knowledge bases of 10^5-10^6 document
chunks, where an exact scan costs hundreds of ms to seconds. The partial
HNSW index ``<table>_hnsw_shared ... WHERE owner LIKE '@%'`` serves them: personal
owners' rows are not in it, so their writes pay nothing for it
(``MEMSERVE_PG_HNSW_SHARED``, loadtests/bench_knowledge.py).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import psycopg
import re2
from psycopg import sql

log = logging.getLogger("memserve")

_SLUG = re2.compile(r"^[a-z0-9_]{1,48}$")


def as_array(value: Any) -> np.ndarray:
    """A fetched pgvector value (numpy array or pgvector ``Vector``) as float32."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def table_name(slug: str) -> str:
    if not _SLUG.match(slug):
        raise ValueError(f"invalid model slug {slug!r}")
    return f"memory_vectors_{slug}"


# The predicate of the shared-owner HNSW index; a query must repeat it verbatim so the
# planner can prove the index covers its rows (owner keys: serve_app.store.records).
SHARED_PREDICATE = "owner LIKE '@%'"


def shared_hnsw_name(table: str) -> str:
    return f"{table}_hnsw_shared"


def _ensure_shared_hnsw(
    conn: psycopg.Connection, table: str, params: tuple[int, int] | None
) -> None:
    """Build (CONCURRENTLY: writes go on during a build over existing chunks) or drop
    the partial HNSW index; an invalid leftover of an interrupted build is rebuilt. A
    valid one built with other parameters is kept (rebuilding 10^6 chunks takes minutes
    that a start should not wait for) and said in a warning: the operator rebuilds it."""
    index = shared_hnsw_name(table)
    row = conn.execute(
        "SELECT ix.indisvalid, c.reloptions FROM pg_index ix"
        " JOIN pg_class c ON c.oid = ix.indexrelid WHERE c.relname = %s",
        (index,),
    ).fetchone()
    if params is None or (row is not None and not row[0]):
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(index)))
        row = None
    if params is not None and row is not None:
        built = dict(o.split("=", 1) for o in row[1] or [])
        wanted = {"m": str(params[0]), "ef_construction": str(params[1])}
        if {k: built.get(k) for k in wanted} != wanted:
            log.warning(
                "%s was built with %s, the settings say %s: it serves as built until"
                " rebuilt (REINDEX INDEX CONCURRENTLY does not change them; drop it and"
                " restart, or create the new one and drop the old)",
                index,
                built,
                wanted,
            )
    if params is None or row is not None:
        return
    conn.execute(
        sql.SQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {i} ON {t}"
            " USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {ef})"
            " WHERE " + SHARED_PREDICATE
        ).format(
            i=sql.Identifier(index),
            t=sql.Identifier(table),
            m=sql.Literal(params[0]),
            ef=sql.Literal(params[1]),
        )
    )


def ensure_table(
    dsn: str,
    slug: str,
    dim: int,
    *,
    hnsw: tuple[int, int] | None = None,
    shared_hnsw: tuple[int, int] | None = None,
) -> str:
    """Create the model's vector table and owner index if missing; return its name.

    ``hnsw`` (``m``, ``ef_construction``): build the global HNSW index if missing;
    ``shared_hnsw``: the same for the shared owners' partial index; None: drop the
    index if an earlier start made one (the settings say what exists)."""
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
            _ensure_shared_hnsw(conn, name, shared_hnsw)
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%(name)s))", {"name": name})
    return name
