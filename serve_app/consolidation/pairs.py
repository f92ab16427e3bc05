"""Pair search and grouping over embeddings for consolidation: which memories are near
each other (blocked cosine top-k, bounded memory) and the connected groups they form.

Pure numpy, no I/O: :class:`serve_app.consolidation.job.Consolidator` runs it in a worker
thread for merge (near-duplicates) and reflect (clusters).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["groups", "near_pairs", "unit_vectors"]


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay ~zero), so a dot product is cosine."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def near_pairs(
    vectors: np.ndarray, threshold: float, max_neighbours: int, block: int = 1024
) -> list[tuple[int, int]]:
    """Index pairs (i < j) with cosine >= ``threshold``, each item paired with at most its
    ``max_neighbours`` nearest: at most ``n * max_neighbours`` pairs, where every pair
    above the threshold would be n^2/2 for n near-identical memories (2000 of them:
    400 MB of tuples). Groups of near-duplicates stay connected through each member's
    nearest; a cluster takes its seed's nearest. Blocked, so memory stays bounded; CPU
    work in numpy, meant for a worker thread (:func:`asyncio.to_thread`)."""
    unit = unit_vectors(np.asarray(vectors, dtype=np.float32))
    n = len(unit)
    k = min(max_neighbours, n - 1)
    if k < 1:
        return []
    found: list[np.ndarray] = []
    for start in range(0, n, block):
        sims = unit[start : start + block] @ unit.T
        rows = np.arange(start, start + len(sims))
        sims[rows - start, rows] = -np.inf  # not its own neighbour
        hits = sims >= threshold
        many = hits.sum(axis=1) > k  # only these need the (costlier) top-k selection
        r, b = np.nonzero(hits[~many])
        a = rows[~many][r]
        if many.any():
            top = np.argpartition(sims[many], n - k, axis=1)[:, n - k :]  # k largest a row
            keep = np.take_along_axis(sims[many], top, axis=1) >= threshold
            a = np.concatenate([a, np.repeat(rows[many], k)[keep.ravel()]])
            b = np.concatenate([b, top[keep]])
        found.append(np.minimum(a, b).astype(np.int64) * n + np.maximum(a, b))
    keys = np.unique(np.concatenate(found))  # a pair found from both ends counts once
    return list(zip((keys // n).tolist(), (keys % n).tolist(), strict=True))


def groups(n: int, pairs: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Connected components of size >= 2 (union-find)."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[find(a)] = find(b)
    out: dict[int, list[int]] = {}
    for i in range(n):
        out.setdefault(find(i), []).append(i)
    return [g for g in out.values() if len(g) > 1]
