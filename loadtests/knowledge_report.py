"""``bench_knowledge``'s FAISS alternative (the hot cache's HNSW of one owner) and its table."""

from __future__ import annotations

import argparse
import time

import numpy as np
import psutil

from loadtests.stats import percentile


def stats(lat: list[float]) -> dict:
    at = {"p50_ms": 50, "p95_ms": 95, "max_ms": 100}
    return {"n": len(lat)} | {k: round(percentile(lat, p), 2) for k, p in at.items()}


def faiss_alt(org: np.ndarray, qs: np.ndarray, args: argparse.Namespace) -> dict:
    """FAISS IndexHNSWFlat over the owner, as the hot cache builds it (cache settings)."""
    import faiss

    from serve_app.settings import Settings

    c = Settings().cache
    faiss.omp_set_num_threads(2)
    rss0 = psutil.Process().memory_info().rss
    t = time.perf_counter()
    index = faiss.IndexHNSWFlat(org.shape[1], c.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = c.hnsw_ef_construction
    index.add(org)
    build = time.perf_counter() - t
    ram = (psutil.Process().memory_info().rss - rss0) / 2**20
    faiss.omp_set_num_threads(1)
    truth = np.argsort(-(qs @ org.T), axis=1)[:, :10]
    out = {
        "n": len(org),
        "m": c.hnsw_m,
        "ef_construction": c.hnsw_ef_construction,
        "build_s": round(build, 1),
        "ram_mb": round(ram, 1),
        "budget_mb": c.budget_mb,
    }
    for ef in (c.hnsw_ef_search, 2 * c.hnsw_ef_search):
        index.hnsw.efSearch = max(ef, args.limit)
        lat = []
        hits = []
        for qv in qs:
            t = time.perf_counter()
            _, ids = index.search(qv[None, :], args.limit)
            lat.append((time.perf_counter() - t) * 1000)
            hits.append(ids[0])
        rec = np.mean([len(set(h) & set(tr)) / 10 for h, tr in zip(hits, truth, strict=True)])
        out[f"ef{index.hnsw.efSearch}"] = {**stats(lat), "recall_at_10": round(float(rec), 4)}
    return out


def table(out: dict) -> None:
    ex, hn, fa = out["exact"], out["hnsw"], out.get("faiss", {})
    if "build_s" not in hn:
        print(f"\nn = {out['n']}: {out['vectors']}\nexact {ex}\nhnsw (capped) {hn}")
        return
    ef = hn["ef_search"]
    fk = next((k for k, v in fa.items() if k.startswith("ef") and isinstance(v, dict)), None)
    rows = [
        ("build s", "-", hn["build_s"], fa.get("build_s", "-")),
        ("index MB", "-", hn["index_mb"], fa.get("ram_mb", "-")),
        (
            "insert chunks/s (org)",
            ex["insert_org"]["chunks_per_s"],
            hn["insert_org"]["chunks_per_s"],
            "-",
        ),
        ("insert chunks/s (personal)", "-", hn["insert_personal"]["chunks_per_s"], "-"),
        ("recall@10", 1.0, hn["sweep"][ef]["recall_at_10"], fa[fk]["recall_at_10"] if fk else "-"),
        ("cold p95 ms", ex["cold"]["p95_ms"], hn["cold"]["p95_ms"], "-"),
        ("hot p50 ms (1 client)", "-", hn["sweep"][ef]["p50_ms"], fa[fk]["p50_ms"] if fk else "-"),
        (
            f"hot p95 ms ({ex['hot']['clients']} clients)",
            ex["hot"]["p95_ms"],
            hn["hot"]["p95_ms"],
            "-",
        ),
        ("hot qps", ex["hot"]["qps"], hn["hot"]["qps"], "-"),
        ("postgres PSS MB", ex["pg_ram_mb"], hn["pg_ram_mb"], "-"),
    ]
    print(f"\nn = {out['n']}: {out['vectors']}")
    print(f"{'':32}{'exact':>12}{f'hnsw ef={ef}':>14}{'faiss hnsw':>12}")
    for name, *cells in rows:
        print(f"{name:32}" + "".join(f"{str(c):>12}  " for c in cells))
