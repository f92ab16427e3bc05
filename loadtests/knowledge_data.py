"""Data for ``bench_knowledge``: real BEIR embeddings (cached), synthesised copies, COPY load.

The knowledge base is one org owner of one tenant holding ``n`` document chunks as the
issue-33 contract stores them (``memory_items`` rows of type ``document_chunk``, source
``document``, scope ``org``, ``data`` = document_id/version/chunk_index/...), next to a
mix of small personal owners. Vectors: the 10,000 BEIR passages in /work/shared/data/ir
embedded with the default model (cached under /tmp); beyond them each chunk is a real
vector plus gaussian noise, renormalised (``SYNTH_NOISE``), because embedding 10^6 texts
on 2 shared cores is out of reach. Queries are the 100 real BEIR queries.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb

IR = Path("/work/shared/data/ir")
SETS = ("agentset_msmarco", "agentset_dbpedia")
CACHE = Path("/tmp/memserve-bench-knowledge-emb.npz")
TENANT = "kb"
ORG = "@org"
# Noise norm added to a unit real vector (then renormalised): cos(copy, original) ~0.86,
# two copies of one passage ~0.74, about what neighbouring chunks of one document score.
SYNTH_NOISE = 0.6
CONTENT_CHARS = 300  # chunk text stored per row (the passage, cut)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def real_embeddings(model: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(passage texts, passage vectors, query vectors), embedded once and cached on disk."""
    texts: list[str] = []
    queries: list[str] = []
    for name in SETS:
        for doc in _jsonl(IR / name / "corpus.jsonl"):
            texts.append(f"{doc.get('title', '')}\n{doc.get('text', '')}".strip())
        queries.extend(q["text"] for q in _jsonl(IR / name / "queries.jsonl"))
    if CACHE.exists():
        z = np.load(CACHE)
        if z["docs"].shape[0] == len(texts) and str(z["model"]) == model:
            return texts, z["docs"], z["queries"]
    from models import load_encoder

    enc = load_encoder(model, device="cpu", threads=2, spinning=False)
    t = time.perf_counter()
    docs = unit(np.asarray(enc.encode(texts), dtype=np.float32))
    qs = unit(np.asarray(enc.encode(queries, is_query=True), dtype=np.float32))
    print(
        f"embedded {len(texts)} passages + {len(queries)} queries in "
        f"{time.perf_counter() - t:.0f}s",
        flush=True,
    )
    np.savez(CACHE, docs=docs, queries=qs, model=np.array(model))
    return texts, docs, qs


def chunk_vectors(real: np.ndarray, start: int, count: int, seed: int) -> np.ndarray:
    """Vectors of chunks ``start..start+count``: the real ones first, then noisy copies."""
    idx = np.arange(start, start + count)
    base = real[idx % len(real)]
    synth = idx >= len(real)
    if synth.any():
        rng = np.random.default_rng(seed + start)
        noise = rng.standard_normal((int(synth.sum()), real.shape[1])).astype(np.float32)
        noise *= SYNTH_NOISE / np.sqrt(real.shape[1])
        base = base.copy()
        base[synth] = unit(base[synth] + noise)
    return base


_ITEM_COPY = (
    "COPY memory_items (id, tenant_id, user_id, scope, type, content, data, dedupe_hash,"
    " source, created_at, updated_at) FROM STDIN (FORMAT BINARY)"
)
_ITEM_TYPES = ["uuid", *["text"] * 5, "jsonb", "text", "text", "timestamptz", "timestamptz"]


def _chunk_row(i: int, texts: list[str], ts: datetime) -> tuple:
    doc, idx = divmod(i, 20)  # 20 chunks per document
    text = texts[i % len(texts)][:CONTENT_CHARS]
    data = {
        "document_id": f"doc-{doc:07d}",
        "version": 1,
        "chunk_index": idx,
        "char_start": idx * 1000,
        "char_end": idx * 1000 + len(text),
        "heading_path": [f"Document {doc}", f"Section {idx // 5}"],
        "title": f"Document {doc}",
        "source_url": f"https://kb.example/doc-{doc}",
    }
    item = uuid.uuid4()
    return (
        item,
        TENANT,
        None,
        "org",
        "document_chunk",
        text,
        Jsonb(data),
        item.hex,
        "document",
        ts,
        ts,
    )


def load(
    dsn: str,
    vt: str,
    texts: list[str],
    real: np.ndarray,
    n: int,
    users: int,
    per_user: int,
    *,
    batch: int = 20_000,
    seed: int = 3,
) -> dict:
    """COPY ``n`` org chunks and ``users`` x ``per_user`` personal memories; timings."""
    t0 = time.perf_counter()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    vcopy = sql.SQL(
        "COPY {} (item_id, tenant_id, owner, embedding) FROM STDIN (FORMAT BINARY)"
    ).format(sql.Identifier(vt))
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)

        def copy(rows: Iterator[tuple], owners: list[str], vecs: np.ndarray) -> None:
            items = list(rows)
            with conn.transaction():
                with conn.cursor().copy(_ITEM_COPY) as cp:
                    cp.set_types(_ITEM_TYPES)
                    for r in items:
                        cp.write_row(r)
                with conn.cursor().copy(vcopy) as cp:
                    cp.set_types(["uuid", "text", "text", "vector"])
                    for r, o, v in zip(items, owners, vecs, strict=True):
                        cp.write_row((r[0], TENANT, o, v))

        for start in range(0, n, batch):
            count = min(batch, n - start)
            rows = (
                _chunk_row(i, texts, base + timedelta(seconds=i))
                for i in range(start, start + count)
            )
            copy(rows, [ORG] * count, chunk_vectors(real, start, count, seed))
            print(f"  org chunks {start + count}/{n} ({time.perf_counter() - t0:.0f}s)", flush=True)
        rng = np.random.default_rng(seed)
        for u0 in range(0, users, 200):
            owners: list[str] = []
            rows_u: list[tuple] = []
            for u in range(u0, min(users, u0 + 200)):
                for j in range(per_user):
                    item = uuid.uuid4()
                    ts = base + timedelta(minutes=j)
                    text = texts[int(rng.integers(0, len(texts)))][:120]
                    rows_u.append(
                        (
                            item,
                            TENANT,
                            f"user{u:05d}",
                            "user",
                            "semantic",
                            text,
                            Jsonb({}),
                            item.hex,
                            "api",
                            ts,
                            ts,
                        )
                    )
                    owners.append(f"user{u:05d}")
            pick = rng.integers(0, len(real), len(rows_u))
            noise = rng.standard_normal((len(rows_u), real.shape[1])).astype(np.float32)
            vecs = unit(real[pick] + noise * SYNTH_NOISE / np.sqrt(real.shape[1]))
            copy(iter(rows_u), owners, vecs)
        conn.execute(
            "INSERT INTO memory_owner_versions (tenant_id, owner, version)"
            " SELECT DISTINCT tenant_id, owner, 1 FROM memory_items WHERE tenant_id = %s"
            " ON CONFLICT DO NOTHING",
            (TENANT,),
        )
        copy_s = time.perf_counter() - t0
        conn.execute("VACUUM ANALYZE memory_items")
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(vt)))
    return {"copy_s": round(copy_s, 1), "rows_per_s": round((n + users * per_user) / copy_s)}
