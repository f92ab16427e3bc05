"""The retriever's logic without Ray: probe, hot cache or pgvector, fusion, ranking.

One search:

1. probe (one statement, the only database round trip of an unfiltered hot search):
   the owners' versions, their sizes if not cached, the query's lexemes, and, for
   filtered queries, the ids passing the filters (capped);
2. hot path, when every owner is cached at a version >= the probed one (or small enough
   to load now): FAISS dense top-n and BM25 top-n from the cache, restricted to the
   allowed ids for filtered queries;
   cold path otherwise: pgvector (exact owner scan or HNSW iterative scan) and full-text
   search; a big cold owner is loaded into the cache in the background;
3. reciprocal rank fusion of the dense and lexical lists (hybrid mode);
4. the candidates' current rows: on the hot path of an unfiltered query, the cache
   entry's own rows (current: the entry's version was just checked); otherwise
   fetched with the owner and filter predicates (so nothing deleted or filtered out
   can come back, whatever the cache holds);
5. :func:`serve_app.ranking.rank`: threshold on cosine similarity, score, top-k.

``deployments/retriever.py`` wraps this class; unit tests use it directly.
"""

from __future__ import annotations

import asyncio
from collections import ChainMap
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import faiss
import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.metrics import RetrieverMetrics
from serve_app.ranking import cap_per_group, rank
from serve_app.retrieval import explain as why
from serve_app.retrieval.cache import HotCache, Key, OwnerIndex, index_params
from serve_app.retrieval.fusion import rrf
from serve_app.retrieval.neighbours import neighbour_boost, neighbour_weight
from serve_app.retrieval.pgvector_search import PgVectorSearch, Probe, shared_approx
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.signals import Segment, direct_scores, expand, mmr, session_key
from serve_app.retrieval.temporal import time_intent
from serve_app.settings import Settings

_BUILD_IN_THREAD = 5_000  # vectors; bigger owners are indexed off the event loop


class Retriever:
    def __init__(self, pool: AsyncConnectionPool, model_slug: str, settings: Settings) -> None:
        self.index_params = index_params(settings)  # built once, used per cache load
        self.r = settings.retrieval
        self.c = settings.cache
        self.pg = PgVectorSearch(
            pool,
            model_slug,
            settings.retrieval.hnsw_ef_search,
            shared_ef_search=settings.retrieval.pg_hnsw_shared_ef_search,
        )
        self.weights = settings.rank
        self.cache = HotCache(settings.cache.budget_mb * 1024 * 1024)
        self._loading: dict[Key, asyncio.Task] = {}
        self._background: set[asyncio.Task] = set()
        self.metrics = RetrieverMetrics(self.cache)  # flushed by the deployment
        faiss.omp_set_num_threads(max(1, settings.cache.faiss_threads))

    @property
    def served(self) -> dict[str, int]:
        """Searches answered from the cache (hot) and from PostgreSQL (cold) so far."""
        totals = self.metrics.lookups.totals
        return {o: int(totals.get((o,), 0)) for o in ("hot", "cold")}

    def candidate_count(self, q: SearchQuery) -> int:
        return max(q.top_k * 3, 30)

    # ---------------------------------------------------------------- search

    async def search(self, q: SearchQuery, vector: np.ndarray) -> list[dict[str, Any]]:
        qv = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(qv))
        qv = qv / norm if norm > 0 else qv
        want_dense = q.mode in ("hybrid", "dense")
        want_lex = q.mode in ("hybrid", "lexical") and bool(q.text.strip())
        owners = q.owner_keys
        cached = self.cache.enabled and all((q.tenant_id, o) in self.cache for o in owners)
        probe = await self.pg.probe(
            q,
            count_cap=0
            if cached
            else max(self.c.sync_load_max, self.r.pg_exact_scan_max, self.r.pg_hnsw_shared_min),
            want_terms=want_lex,
            allowed_cap=self.c.filter_max_ids if self.cache.enabled else 0,
        )
        # The cache holds active memories valid now: archived ones, retired ones and
        # another time's (as_of) are searched in PostgreSQL.
        hot = self.cache.enabled and not q.include_archived and q.current
        entries = await self._entries(q, probe) if hot else None
        parts: why.Parts | None = {} if q.explain else None  # None: no breakdown (no cost)
        if entries is not None:
            self.metrics.lookup("hot")
            return await self._hot(q, qv, probe, entries, want_dense, want_lex, parts)
        self.metrics.lookup("cold")
        return await self._cold(q, qv, probe, want_dense, want_lex, parts)

    async def _entries(self, q: SearchQuery, probe: Probe) -> list[OwnerIndex] | None:
        """Fresh cache entries for every owner, loading small ones now; None: go cold."""
        if probe.allowed_overflow:
            return None
        out: list[OwnerIndex] = []
        for owner in q.owner_keys:
            key = (q.tenant_id, owner)
            version = probe.versions.get(owner, 0)
            entry = self.cache.get(key, version)
            if entry is None:
                size = probe.counts.get(owner)
                if size is not None and size > self.c.sync_load_max:
                    # a knowledge base the shared HNSW index serves: not worth a replica's RAM
                    if not shared_approx([owner], probe.counts, self.r):
                        self._load_behind(key)
                    return None
                entry = await self._load(key)
                if entry.version < version:  # joined a load that began before the write
                    entry = await self._load(key, fresh=True)
                if entry.version < version:
                    return None
            out.append(entry)
        return out

    async def _hot(
        self,
        q: SearchQuery,
        qv: np.ndarray,
        probe: Probe,
        entries: list[OwnerIndex],
        want_dense: bool,
        want_lex: bool,
        parts: why.Parts | None = None,
    ) -> list[dict[str, Any]]:
        if q.mode == "hybrid" and self.r.fusion == "zscore" and want_lex:
            fused = self._zscore(q, qv, probe, entries, parts)
            if fused is not None:
                sims, _, relevance = fused
                rows = self._cached_rows(q, entries)
                return await self._finish(q, [], [], sims, rows, relevance, parts)
        depth_d = max(self.r.dense_depth, 3 * q.top_k)
        depth_l = max(self.r.lexical_depth, 3 * q.top_k)
        dense: list[tuple[Any, float]] = []
        lexical: list[tuple[Any, float]] = []
        for e in entries:
            allowed = e.rows_for(probe.allowed) if probe.allowed is not None else None
            if want_dense:
                dense.extend(e.dense(qv, depth_d, allowed))
            if want_lex:
                hits = e.bm25.top(probe.terms, depth_l, allowed)
                lexical.extend((e.ids[r], s) for r, s in hits)
        dense.sort(key=lambda t: -t[1])
        lexical.sort(key=lambda t: -t[1])
        dense, lexical = dense[:depth_d], lexical[:depth_l]
        sims = dict(dense)
        missing = [i for i, _ in lexical if i not in sims]
        for e in entries:
            if missing:
                sims.update(e.similarity(qv, missing))
        return await self._finish(
            q,
            [i for i, _ in dense],
            [i for i, _ in lexical],
            sims,
            self._cached_rows(q, entries),
            parts=parts,
        )

    @staticmethod
    def _cached_rows(q: SearchQuery, entries: list[OwnerIndex]) -> Mapping[Any, dict[str, Any]]:
        """The entries' own rows for an unfiltered query ({}: read them from the database).

        The entries were checked against the owners' versions in this search, so their
        rows are current; a filtered query reads rows with its filter predicates instead.
        A view over the entries, not a copy: the hot path does no per-row work here.
        """
        if q.filtered or any(len(e) and not e.rows for e in entries):
            return {}
        return entries[0].rows if len(entries) == 1 else ChainMap(*(e.rows for e in entries))

    def _zscore(
        self,
        q: SearchQuery,
        qv: np.ndarray,
        probe: Probe,
        entries: list[OwnerIndex],
        parts: why.Parts | None = None,
    ) -> tuple[dict[Any, float], dict[Any, dict], dict[Any, float]] | None:
        """Score fusion over the whole cached set: alpha * z(cosine) + (1 - alpha) * z(BM25).

        Standardising each score over all of the owner's memories (not just the top
        candidates) keeps their scales comparable; on LoCoMo it beats RRF (see
        loadtests/eval_retrieval.py). Flat (small) owners only; None: use RRF.
        Then each memory gets a share of its best neighbour's fused score in the
        owner's creation order (the cache's row order, as loaded), in proportion to
        how coherent that order is, see :mod:`serve_app.retrieval.neighbours`.
        """
        rs = self.r
        ids: list[Any] = []
        dense, lex, positions, weights, direct = [], [], [], [], []
        segments: list[Segment] = []
        intent = time_intent(q.text, q.reference_day)
        offset = 0  # owners' positions apart by a gap: no neighbours across owners
        for e in entries:
            if not len(e):  # an owner with nothing stored (an org without knowledge)
                continue  # adds no rows; it must not send every search to RRF
            x = e.all_vectors()
            if x is None or len(e) > self.r.fusion_full_max:
                return None
            rows = e.rows_for(probe.allowed) if probe.allowed is not None else None
            d, lx = x @ qv, e.bm25.scores(probe.terms)
            if rows is not None:
                rows = np.sort(rows)  # creation order
                d, lx = d[rows], lx[rows]
                ids.extend(e.ids[int(r)] for r in rows)
            else:
                ids.extend(e.ids)
                rows = np.arange(len(e))
            names = e.signals.entities.query_names(q.text) if e.signals is not None else []
            segments.append(Segment(e.signals, rows, len(ids) - len(rows), tuple(names)))
            direct.append(
                direct_scores(
                    segments[-1], intent, rs.entity_weight, rs.time_weight, rs.period_weight
                )
            )
            dense.append(d)
            lex.append(lx)
            positions.append(rows + offset)
            offset += len(e) + 1
            w = neighbour_weight(
                self.r.fusion_neighbour_weight, e.coherence(), self.r.fusion_neighbour_coherence
            )
            weights.append(np.full(len(rows), w, dtype=np.float32))
        if not ids:
            return {}, {}, {}
        d, lx = np.concatenate(dense), np.concatenate(lex)

        def z(v: np.ndarray) -> np.ndarray:
            sd = float(v.std())
            return (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)

        a = self.r.fusion_alpha
        s0 = a * z(d) + (1 - a) * z(lx) + np.concatenate(direct)
        s1 = neighbour_boost(s0, np.concatenate(weights), np.concatenate(positions))
        s = expand(s1, segments, rs.expand_seeds, rs.expand_entity_weight, rs.expand_session_weight)
        n = min(self.candidate_count(q), len(ids))
        top = np.argpartition(-s, n - 1)[:n]
        top = top[np.argsort(-s[top], kind="stable")]
        if parts is not None:
            t = why.time_part(segments, intent, rs.time_weight, rs.period_weight)
            lexical, direct_all = (1 - a) * z(lx), np.concatenate(direct)
            parts.update(
                why.zscore_parts(
                    ids,
                    top,
                    lexical=lexical,
                    time=t,
                    entity=direct_all - t,
                    neighbour=s1 - s0,
                    expansion=s - s1,
                )
            )
        lo, hi = float(s[top[-1]]), float(s[top[0]])
        span = hi - lo if hi > lo else 1.0
        if rs.mmr_penalty > 0:
            top = mmr(
                top, (s[top] - lo) / span, self._vectors(top, segments, entries), rs.mmr_penalty
            )
            s = s.copy()
            s[top] = hi - span * np.arange(len(top)) / max(len(top) - 1, 1)  # the MMR order
        sims = {ids[i]: float(d[i]) for i in top}
        relevance = {ids[i]: (float(s[i]) - lo) / span for i in top}
        return sims, {}, relevance

    @staticmethod
    def _vectors(top: np.ndarray, segments: list[Segment], entries: list[OwnerIndex]) -> np.ndarray:
        """Unit vectors of fused positions ``top`` (segments and entries are aligned)."""
        out = []
        for g in top:
            j = next(k for k, x in enumerate(segments) if x.start <= g < x.start + len(x.rows))
            out.append(entries[j].all_vectors()[int(segments[j].rows[g - segments[j].start])])
        return np.asarray(out, dtype=np.float32)

    async def _cold(
        self,
        q: SearchQuery,
        qv: np.ndarray,
        probe: Probe,
        want_dense: bool,
        want_lex: bool,
        parts: why.Parts | None = None,
    ) -> list[dict[str, Any]]:
        depth_d = max(self.r.dense_depth, 3 * q.top_k)
        depth_l = max(self.r.lexical_depth, 3 * q.top_k)
        shared = shared_approx(q.owner_keys, probe.counts, self.r)
        sizes = [probe.counts.get(o) for o in q.owner_keys if o not in shared]
        exact = all(n is not None for n in sizes) and sum(sizes) <= self.r.pg_exact_scan_max
        if q.mode == "dense":
            depth_d = self.candidate_count(q)
        dense_rows = (
            await self.pg.dense(q, qv, depth_d, exact=exact, shared_approx=shared)
            if want_dense
            else []
        )
        lex_rows = await self.pg.lexical(q, qv, probe.terms, depth_l) if want_lex else []
        rows = {r["id"]: r for r in (*lex_rows, *dense_rows)}
        sims = {i: float(r["similarity"]) for i, r in rows.items()}
        dense_ids, lex_ids = [r["id"] for r in dense_rows], [r["id"] for r in lex_rows]
        return await self._finish(q, dense_ids, lex_ids, sims, rows, parts=parts)

    async def _finish(
        self,
        q: SearchQuery,
        dense_ids: list[Any],
        lex_ids: list[Any],
        sims: dict[Any, float],
        rows: Mapping[Any, dict[str, Any]],
        relevance: dict[Any, float] | None = None,
        parts: why.Parts | None = None,
    ) -> list[dict[str, Any]]:
        """Fuse, fetch current rows (if not fetched yet), attach scores (and their
        breakdown when ``parts`` is given: an ``explain`` search), rank."""
        n = self.candidate_count(q)
        if relevance is not None:  # already fused (score fusion)
            order = sorted(relevance, key=lambda i: (-relevance[i], str(i)))
        elif q.mode == "dense":
            order = dense_ids[:n]
            relevance = {i: sims[i] for i in order}
        else:
            fused = rrf(
                [dense_ids, lex_ids], [self.r.rrf_w_dense, self.r.rrf_w_lexical], self.r.rrf_k
            )
            order = sorted(fused, key=lambda i: (-fused[i], str(i)))[:n]
            relevance = {i: fused[i] for i in order}
            if parts is not None:
                r = self.r
                parts.update(
                    why.rrf_parts(dense_ids, lex_ids, r.rrf_w_lexical, r.rrf_w_dense, r.rrf_k)
                )
        if not rows:
            rows = await self.pg.fetch(q, order)
        now = datetime.now(UTC)
        out = []
        for i in order:
            row = rows.get(i)
            if row is None:  # deleted or no longer matching since it was cached
                continue
            if row["expires_at"] is not None and row["expires_at"] <= now:
                continue  # expired since it was cached (expiry bumps no version)
            if q.current and row["valid_until"] is not None and row["valid_until"] <= now:
                continue  # a planned end of validity passed since it was cached
            row = dict(row)
            row["similarity"] = sims.get(i)
            row["relevance"] = relevance[i]
            out.append(row)
        cap = self.r.session_cap
        ranked = rank(
            out, self.weights, top_k=len(out) if cap else q.top_k, threshold=q.threshold, now=now
        )
        if cap:
            ranked = cap_per_group(ranked, [session_key(r) for r in ranked], cap, q.top_k)
        if parts is not None:
            why.attach(ranked, parts, self.weights, now)
        for r in ranked:
            r.pop("relevance", None)
        return ranked

    # ---------------------------------------------------------------- loading

    async def _load(self, key: Key, *, fresh: bool = False) -> OwnerIndex:
        """Load an owner into the cache, sharing one load between concurrent searches."""
        task = None if fresh else self._loading.get(key)
        if task is None:
            task = asyncio.ensure_future(self._do_load(key))
            self._loading[key] = task
            task.add_done_callback(
                lambda t, k=key: self._loading.pop(k, None) if self._loading.get(k) is t else None
            )
        return await asyncio.shield(task)

    def _load_behind(self, key: Key) -> None:
        if key in self._loading:
            return
        task = asyncio.ensure_future(self._load(key))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _do_load(self, key: Key) -> OwnerIndex:
        rows = await self.pg.load_owner(*key)

        def build() -> OwnerIndex:
            return OwnerIndex.build(
                key,
                rows.version,
                rows.ids,
                rows.vectors,
                rows.docs,
                **self.index_params,
                rows=rows.rows,
            )

        entry = await asyncio.to_thread(build) if len(rows.ids) > _BUILD_IN_THREAD else build()
        self.cache.put(entry)
        return entry

    async def close(self) -> None:
        for t in list(self._background):
            t.cancel()
