"""The hot cache's budget counts what rows really hold (content, tags, metadata)."""

from __future__ import annotations

import datetime as dt
import json
import tracemalloc
import uuid

import numpy as np

from serve_app.retrieval.cache import OwnerIndex
from serve_app.retrieval.rowsize import row_nbytes

PARAMS = dict(
    hnsw_threshold=10_000, hnsw_m=16, ef_construction=40, ef_search=64, bm25_k1=1.2, bm25_b=0.3
)


def _rows(n: int, metadata_bytes: int) -> list[dict]:
    """Rows as psycopg returns them: a 1-character memory with big metadata and tags."""
    now = dt.datetime.now(dt.UTC)
    out = []
    for i in range(n):
        # json round trip: fresh objects, as the driver builds them (nothing shared)
        meta = json.loads(
            json.dumps({f"k{j}_{i}": "v" * 90 + str(i) for j in range(metadata_bytes // 100)})
        )
        out.append(
            {
                "id": uuid.uuid4(),
                "user_id": f"user{i}",
                "type": "semantic",
                "content": f"{i % 10}",
                "tags": [f"tag{j}-{i}" for j in range(8)],
                "metadata": meta,
                "importance": 0.5 + i * 1e-6,
                "created_at": now + dt.timedelta(seconds=i),
                "updated_at": now + dt.timedelta(seconds=i),
            }
        )
    return out


def test_row_size_is_within_2x_of_tracemalloc():
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    rows = _rows(300, 16_000)
    by_id = {r["id"]: r for r in rows}
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    measured = sum(s.size_diff for s in after.compare_to(before, "filename"))
    estimated = sum(map(row_nbytes, by_id.values()))
    assert measured > 300 * 16_000  # the metadata really is there
    assert measured / 2 <= estimated <= measured * 2, (estimated, measured)


def test_owner_index_budget_counts_metadata_not_content_length():
    rows = _rows(50, 16_000)
    ids = [r["id"] for r in rows]
    vectors = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    docs = [{"x": 1} for _ in rows]
    bare = OwnerIndex.build(("t", "u"), 1, ids, vectors, docs, **PARAMS)
    full = OwnerIndex.build(("t", "u"), 1, ids, vectors, docs, rows=rows, **PARAMS)
    # 1-character contents: the old estimate (content length + 400 per row) was ~20 KB.
    assert full.nbytes() - bare.nbytes() > 50 * 16_000
