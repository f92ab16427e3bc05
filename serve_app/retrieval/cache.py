"""The hot cache: one FAISS index (plus BM25 postings) per (tenant, owner), LRU under a budget.

Exact inner product (``IndexFlatIP``) for small owners, HNSW above a size threshold.
Vectors are L2-normalised on load so inner product is cosine similarity. Every entry
carries the owner's version (``memory_owner_versions``) read in the same snapshot as
its rows; the retriever compares it with the database on every search, so an entry
is never used after a write to its owner has committed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import faiss
import numpy as np

from serve_app.retrieval.lexical import BM25
from serve_app.retrieval.neighbours import sequential_coherence
from serve_app.retrieval.rowsize import row_nbytes
from serve_app.retrieval.signals import MemorySignals
from serve_app.settings import Settings

Key = tuple[str, str]  # (tenant_id, owner)


def index_params(s: Settings) -> dict[str, Any]:
    """OwnerIndex.build's tunables, from the cache and retrieval settings groups."""
    return {
        "hnsw_threshold": s.cache.hnsw_threshold,
        "hnsw_m": s.cache.hnsw_m,
        "ef_construction": s.cache.hnsw_ef_construction,
        "ef_search": s.cache.hnsw_ef_search,
        "bm25_k1": s.retrieval.bm25_k1,
        "bm25_b": s.retrieval.bm25_b,
    }


@dataclass
class OwnerIndex:
    """One owner's vectors and lexical postings; row i of the index is ``ids[i]``."""

    key: Key
    version: int
    ids: list[Any]
    index: faiss.Index
    bm25: BM25
    row_of: dict[Any, int] = field(default_factory=dict)
    kind: str = "flat"
    # Current memory_items rows by id (as of ``version``): an unfiltered search on a
    # fresh entry answers without reading them again. Empty: not kept.
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)
    # entities, referenced time and session of each row (built from ``rows`` on load)
    signals: MemorySignals | None = None
    # sequential_coherence of the vectors in row order, computed on first use
    coherence_: float | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        key: Key,
        version: int,
        ids: list[Any],
        vectors: np.ndarray,
        docs: list[dict[str, int]],
        *,
        hnsw_threshold: int,
        hnsw_m: int,
        ef_construction: int,
        ef_search: int,
        bm25_k1: float,
        bm25_b: float,
        rows: list[dict[str, Any]] | None = None,
    ) -> OwnerIndex:
        dim = vectors.shape[1] if vectors.ndim == 2 and len(vectors) else 1
        x = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), dim)
        if len(x):
            faiss.normalize_L2(x)
        if len(ids) > hnsw_threshold:
            index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
            index.hnsw.efSearch = ef_search
            kind = "hnsw"
        else:
            index = faiss.IndexFlatIP(dim)
            kind = "flat"
        if len(x):
            index.add(x)
        return cls(
            key=key,
            version=version,
            ids=list(ids),
            index=index,
            bm25=BM25(docs, bm25_k1, bm25_b),
            row_of={i: r for r, i in enumerate(ids)},
            kind=kind,
            rows={r["id"]: r for r in rows or ()},
            signals=MemorySignals.build(rows) if rows and len(rows) == len(ids) else None,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def nbytes(self) -> int:
        n, d = len(self.ids), self.index.d
        graph = n * self.index.hnsw.nb_neighbors(0) * 4 * 1.2 if self.kind == "hnsw" else 0
        rows = sum(map(row_nbytes, self.rows.values()))  # content, tags, metadata, ...
        signals = self.signals.nbytes() if self.signals is not None else 0
        return int(n * d * 4 + graph + n * 90 + self.bm25.nbytes() + rows + signals)

    def dense(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[Any, float]]:
        """(item id, cosine) of the nearest ``k``; ``allowed`` rows restrict the search."""
        if not self.ids or k <= 0:
            return []
        if allowed is not None:
            if len(allowed) == 0:
                return []
            # Exact over the allowed subset (it is small: the caller caps it).
            sims = self.vectors(allowed) @ query
            order = np.argsort(-sims, kind="stable")[:k]
            return [(self.ids[int(allowed[i])], float(sims[i])) for i in order]
        k = min(k, len(self.ids))
        sims, rows = self.index.search(query.reshape(1, -1), k)
        return [(self.ids[r], float(s)) for r, s in zip(rows[0], sims[0], strict=True) if r >= 0]

    def all_vectors(self) -> np.ndarray | None:
        """Zero-copy view of a flat index's vectors (None for HNSW)."""
        if self.kind != "flat" or not self.ids:
            return None
        n, d = len(self.ids), self.index.d
        return faiss.rev_swig_ptr(self.index.get_xb(), n * d).reshape(n, d)

    def coherence(self) -> float:
        """How much consecutive rows (load order) are more alike than any two; 0 for HNSW.

        See :func:`serve_app.retrieval.neighbours.sequential_coherence`.
        """
        if self.coherence_ is None:
            x = self.all_vectors()
            self.coherence_ = sequential_coherence(x) if x is not None else 0.0
        return self.coherence_

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self.index.reconstruct_batch(np.asarray(rows, dtype=np.int64))

    def similarity(self, query: np.ndarray, item_ids: list[Any]) -> dict[Any, float]:
        rows = [self.row_of[i] for i in item_ids if i in self.row_of]
        if not rows:
            return {}
        sims = self.vectors(np.asarray(rows)) @ query
        return {self.ids[r]: float(s) for r, s in zip(rows, sims, strict=True)}

    def rows_for(self, item_ids: list[Any]) -> np.ndarray:
        return np.asarray([self.row_of[i] for i in item_ids if i in self.row_of], dtype=np.int64)


class HotCache:
    """LRU of :class:`OwnerIndex` under a byte budget; thread-safe bookkeeping."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._entries: OrderedDict[Key, OwnerIndex] = OrderedDict()
        self._bytes: dict[Key, int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.invalidations = 0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def get(self, key: Key, version: int) -> OwnerIndex | None:
        """The entry if it is at least as new as ``version`` (counts a hit or a miss)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.version >= version:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
            if entry is not None:  # stale: a write committed since it was loaded
                self._drop(key)
                self.invalidations += 1
            self.misses += 1
            return None

    def put(self, entry: OwnerIndex) -> bool:
        """Insert (or replace with a newer) entry; evict LRU entries to fit the budget."""
        size = entry.nbytes()
        if size > self.budget:
            return False
        with self._lock:
            old = self._entries.get(entry.key)
            if old is not None and old.version > entry.version:
                return False
            if old is not None:
                self._drop(entry.key)
            self._entries[entry.key] = entry
            self._bytes[entry.key] = size
            while self.nbytes > self.budget and len(self._entries) > 1:
                lru = next(iter(self._entries))
                self._drop(lru)
                self.evictions += 1
            return True

    def invalidate(self, tenant_id: str, owner: str, version: int | None = None) -> bool:
        """Drop the owner's entry if it is older than ``version`` (None: always)."""
        key = (tenant_id, owner)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (version is not None and entry.version >= version):
                return False
            self._drop(key)
            self.invalidations += 1
            return True

    def drop_where(self, predicate) -> int:
        """Drop every entry whose key satisfies ``predicate`` (shard unloaded by Serve)."""
        with self._lock:
            keys = [k for k in self._entries if predicate(k)]
            for k in keys:
                self._drop(k)
            return len(keys)

    def _drop(self, key: Key) -> None:
        self._entries.pop(key, None)
        self._bytes.pop(key, None)

    @property
    def nbytes(self) -> int:
        return sum(self._bytes.values())

    def __contains__(self, key: Key) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "entries": len(self._entries),
            "bytes": self.nbytes,
            "budget_bytes": self.budget,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hit_rate, 4),
            "evictions": self.evictions,
            "invalidations": self.invalidations,
            "vectors": sum(len(e) for e in self._entries.values()),
        }
