"""Random unit vectors for the store tests (the ``test`` vector table has DIM dimensions)."""

from __future__ import annotations

import numpy as np

DIM = 8


def vecs(n: int, seed: int = 0) -> np.ndarray:
    """``n`` L2-normalised float32 vectors, the same for the same seed."""
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)
