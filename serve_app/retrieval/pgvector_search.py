"""Everything the retriever asks PostgreSQL: probe, owner loads, pgvector and full-text search.

Dense search over small owners is an exact scan through the (tenant_id, owner)
btree (a materialised CTE keeps the planner off the HNSW index, so a selective
owner filter cannot starve the result); big owners use the HNSW index with
pgvector 0.8 iterative scans (``relaxed_order``, re-sorted here) so filtered
queries still return k rows: big shared owners (knowledge bases) the partial index
over ``@`` owners, others the global index where one exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from serve_app.retrieval.lexical import or_tsquery, parse_tsvector
from serve_app.retrieval.query import SearchQuery, item_filters
from serve_app.settings.retrieval import RetrievalSettings
from serve_app.store.records import MEMORY_COLUMNS, column_list, live, valid
from serve_app.store.vectors import SHARED_PREDICATE, as_array, table_name

_ITEM_COLS = column_list(MEMORY_COLUMNS, "i")
HNSW_EF_SEARCH_MAX = 1000  # pgvector refuses a wider hnsw.ef_search


def shared_approx(
    owners: Sequence[str], counts: Mapping[str, int], r: RetrievalSettings
) -> list[str]:
    """Shared owners (``@org``, ``@agent:<id>``) big enough for the partial HNSW index
    (``pg_hnsw_shared_min`` vectors, as the probe counted them); the rest stay exact."""
    if not r.pg_hnsw_shared:
        return []
    return [o for o in owners if o.startswith("@") and counts.get(o, 0) >= r.pg_hnsw_shared_min]


@dataclass
class Probe:
    """What one round trip tells a search before it touches the cache."""

    versions: dict[str, int]
    counts: dict[str, int] = field(default_factory=dict)  # capped; only when asked
    terms: dict[str, int] = field(default_factory=dict)  # query lexemes
    allowed: list[Any] | None = None  # ids passing the filters (None: unfiltered or too many)
    allowed_overflow: bool = False


@dataclass
class OwnerRows:
    version: int
    ids: list[Any]
    vectors: np.ndarray
    docs: list[dict[str, int]]
    rows: list[dict[str, Any]] = field(default_factory=list)  # memory_items columns


class PgVectorSearch:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        ef_search: int,
        *,
        shared_ef_search: int | None = None,
    ) -> None:
        """``shared_ef_search``: the scan width of the shared owners' partial index (a
        knowledge base of 10^6 chunks needs a wider one than the global index; None: the
        same as ``ef_search``)."""
        self.pool = pool
        self.vectors = sql.Identifier(table_name(model_slug))
        self.ef_search = ef_search
        self.shared_ef_search = shared_ef_search or ef_search

    async def probe(
        self, q: SearchQuery, *, count_cap: int, want_terms: bool, allowed_cap: int
    ) -> Probe:
        """Owner versions (+ capped sizes), query lexemes and filtered ids in one statement."""
        # tenant_id and owners carry the same values as item_filters' parameters of those names
        params: dict[str, Any] = {"tenant_id": q.tenant_id, "owners": list(q.owner_keys)}
        parts: list[sql.Composable]
        if count_cap <= 0:  # the hot path: versions only, a lean statement
            parts = [
                sql.SQL(
                    "(SELECT coalesce(json_agg(json_build_array(mv.owner, mv.version, NULL)),"
                    " '[]') FROM memory_owner_versions mv WHERE mv.tenant_id = %(tenant_id)s"
                    " AND mv.owner = ANY(%(owners)s)) AS owners"
                )
            ]
        else:
            parts = [
                sql.SQL(
                    "(SELECT coalesce(json_agg(json_build_array(o.owner, coalesce(mv.version, 0),"
                    " (SELECT count(*) FROM (SELECT 1 FROM {v} v WHERE v.tenant_id = %(tenant_id)s"
                    " AND v.owner = o.owner LIMIT %(count_cap)s) s))), '[]')"
                    " FROM unnest(%(owners)s::text[]) AS o(owner)"
                    " LEFT JOIN memory_owner_versions mv"
                    " ON mv.tenant_id = %(tenant_id)s AND mv.owner = o.owner) AS owners"
                ).format(v=self.vectors)
            ]
            params["count_cap"] = count_cap
        if want_terms:
            parts.append(sql.SQL("to_tsvector('english', %(text)s)::text AS terms"))
            params["text"] = q.text
        if q.filtered and allowed_cap > 0:
            where, wparams = item_filters(q)
            parts.append(
                sql.SQL(
                    "array(SELECT i.id FROM memory_items i WHERE {}"
                    " LIMIT %(allowed_limit)s) AS allowed"
                ).format(where)
            )
            params.update(wparams, allowed_limit=allowed_cap + 1)
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql.SQL("SELECT ") + sql.SQL(", ").join(parts), params)
            row = await cur.fetchone()
        probe = Probe(versions={o: int(ver) for o, ver, _ in row["owners"]})  # absent: 0
        probe.counts = {o: int(n) for o, _, n in row["owners"] if n is not None}
        if want_terms:
            probe.terms = parse_tsvector(row["terms"])
        if "allowed" in row:
            if len(row["allowed"]) > allowed_cap:
                probe.allowed_overflow = True
            else:
                probe.allowed = list(row["allowed"])
        return probe

    async def load_owner(self, tenant_id: str, owner: str) -> OwnerRows:
        """The owner's active rows valid now, vectors and lexemes with the version of the
        same snapshot (retiring a memory bumps the version, so no stale entry survives)."""
        key = {"tenant_id": tenant_id, "owner": owner}
        async with self.pool.connection() as conn:
            await conn.set_isolation_level(3)  # REPEATABLE READ: one snapshot for both reads
            try:
                async with conn.transaction():
                    cur = await conn.execute(
                        "SELECT version FROM memory_owner_versions"
                        " WHERE tenant_id = %(tenant_id)s AND owner = %(owner)s",
                        key,
                    )
                    row = await cur.fetchone()
                    cur = await conn.execute(
                        sql.SQL(
                            "SELECT v.embedding, i.tsv::text AS tsv, {cols} FROM {v} v"
                            " JOIN memory_items i ON i.id = v.item_id"
                            " WHERE v.tenant_id = %(tenant_id)s AND v.owner = %(owner)s"
                            " AND i.status = 'active'"
                            " AND "
                            + live("i.")
                            + " AND "
                            + valid("i.")
                            + " ORDER BY i.seq"  # write order: neighbours are context
                        ).format(cols=_ITEM_COLS, v=self.vectors),
                        key,
                    )
                    rows = await cur.fetchall()
            finally:
                await conn.set_isolation_level(None)
        vecs = (
            np.stack([as_array(r.pop("embedding")) for r in rows])
            if rows
            else np.zeros((0, 1), dtype=np.float32)
        )
        docs = [parse_tsvector(r.pop("tsv")) for r in rows]
        return OwnerRows(
            version=int(row["version"]) if row else 0,
            ids=[r["id"] for r in rows],
            vectors=vecs,
            docs=docs,
            rows=rows,  # what is left: the memory_items columns a search returns
        )

    async def dense(
        self,
        q: SearchQuery,
        vector: np.ndarray,
        limit: int,
        *,
        exact: bool,
        shared_approx: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """Nearest items by cosine: exact owner scan, or HNSW with iterative scans.

        ``shared_approx``: shared owners (``@...``) big enough for the partial HNSW index
        (``serve_app.store.vectors.SHARED_PREDICATE``), each read through it; the other
        owners as ``exact`` says. Owners are disjoint, so the parts merge by similarity."""
        vec = np.asarray(vector, dtype=np.float32)
        rest = [o for o in q.owner_keys if o not in shared_approx]
        parts = [(rest, exact, False)] if rest else []
        parts += [([owner], False, True) for owner in shared_approx]
        rows: list[dict[str, Any]] = []
        for owners, part_exact, shared in parts:
            query, params = self.dense_sql(q, vec, limit, owners, exact=part_exact, shared=shared)
            async with self.pool.connection() as conn, conn.transaction():
                if not part_exact:
                    await self.set_hnsw(conn, limit, shared=shared)
                cur = await conn.execute(query, params)
                rows.extend(await cur.fetchall())
        rows.sort(key=lambda r: -r["similarity"])  # relaxed_order may be slightly off
        return rows[:limit]

    async def set_hnsw(self, conn: Any, limit: int, *, shared: bool = False) -> None:
        """This transaction's HNSW scan: ef_search (at least the limit; the shared
        index's own width for a ``shared`` owner), iterative, and a custom plan: psycopg
        prepares a statement run 5 times, and PostgreSQL's generic plan of it (owner
        unknown, so estimated small) reads the owner btree and sorts the whole owner
        (measured: 2.3 s instead of 25-95 ms at 10^5 chunks)."""
        width = self.shared_ef_search if shared else self.ef_search
        ef = sql.Literal(min(max(width, limit), HNSW_EF_SEARCH_MAX))
        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(ef))
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")

    def dense_sql(
        self,
        q: SearchQuery,
        vec: np.ndarray,
        limit: int,
        owners: list[str],
        *,
        exact: bool,
        shared: bool,
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The statement of one dense part (tests EXPLAIN it)."""
        where, params = item_filters(q)  # binds tenant_id and owners, reused below
        params.update(vec=vec, limit=limit, owners=owners)
        if exact:
            query = sql.SQL(
                "WITH c AS MATERIALIZED (SELECT v.item_id, v.embedding <=> %(vec)s AS d"
                " FROM {v} v WHERE v.tenant_id = %(tenant_id)s AND v.owner = ANY(%(owners)s))"
                " SELECT {cols}, 1 - c.d AS similarity FROM c"
                " JOIN memory_items i ON i.id = c.item_id WHERE {w} ORDER BY c.d LIMIT %(limit)s"
            ).format(cols=_ITEM_COLS, v=self.vectors, w=where)
        else:
            # One shared owner: equality plus the partial index's own predicate, which
            # lets the planner prove the index covers the rows.
            owner = (
                sql.SQL("v.owner = %(owner)s AND v." + SHARED_PREDICATE.replace("%", "%%"))
                if shared
                else sql.SQL("v.owner = ANY(%(owners)s)")
            )
            params["owner"] = owners[0]
            query = sql.SQL(
                "SELECT {cols}, 1 - (v.embedding <=> %(vec)s) AS similarity"
                " FROM {v} v JOIN memory_items i ON i.id = v.item_id"
                " WHERE v.tenant_id = %(tenant_id)s AND {o} AND {w}"
                " ORDER BY v.embedding <=> %(vec)s LIMIT %(limit)s"
            ).format(cols=_ITEM_COLS, v=self.vectors, w=where, o=owner)
        return query, params

    async def lexical(
        self, q: SearchQuery, vector: np.ndarray, terms: dict[str, int], limit: int
    ) -> list[dict[str, Any]]:
        """Full-text matches (OR of the query's lexemes) by ts_rank, with their cosine."""
        tsq = or_tsquery(terms)
        if not tsq:
            return []
        where, params = item_filters(q)
        query = sql.SQL(
            "SELECT {cols}, 1 - (v.embedding <=> %(vec)s) AS similarity,"
            " ts_rank(i.tsv, %(tsq)s::tsquery, 1) AS lexical"
            " FROM memory_items i JOIN {v} v ON v.item_id = i.id"
            " WHERE {w} AND i.tsv @@ %(tsq)s::tsquery ORDER BY lexical DESC, i.id LIMIT %(limit)s"
        ).format(cols=_ITEM_COLS, v=self.vectors, w=where)
        params.update(vec=np.asarray(vector, dtype=np.float32), tsq=tsq, limit=limit)
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def fetch(self, q: SearchQuery, ids: list[Any]) -> dict[Any, dict[str, Any]]:
        """Current rows of candidate ids that still pass the query's owner and filters."""
        if not ids:
            return {}
        where, params = item_filters(q)
        query = sql.SQL(
            "SELECT {cols} FROM memory_items i WHERE i.id = ANY(%(ids)s) AND {w}"
        ).format(cols=_ITEM_COLS, w=where)
        params["ids"] = ids
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return {r["id"]: r for r in await cur.fetchall()}
