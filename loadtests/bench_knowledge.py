"""Knowledge-base scale: exact owner scan vs pgvector HNSW vs FAISS HNSW for one big org owner.

Issue 33 item 4. Loads ``--n`` document chunks into the ``@org`` owner of one tenant
(plus ``--users`` x ``--per-user`` personal memories) as the documents contract stores
them, with binary COPY (``loadtests/knowledge_data.py``: real BEIR embeddings of the
default model where there are some, noisy copies of them beyond, said in the output).
Then, on the same data, side by side:

* exact: the product's exact query (materialised owner scan through the (tenant_id,
  owner) btree), no HNSW index;
* pgvector HNSW: the partial index ``... USING hnsw ... WHERE owner LIKE '@%'`` that
  ``serve_app.store.vectors`` creates (``MEMSERVE_PG_HNSW_SHARED``), queried with
  ``hnsw.iterative_scan = relaxed_order`` and a sweep of ``hnsw.ef_search``;
* FAISS ``IndexHNSWFlat`` of the same owner as the Retriever's hot cache builds it.

Measured: build time, index size, insert cost per chunk with and without the index
(batches of 100, rolled back; and into a personal owner, which the partial index does
not touch), recall@10 against the exact query, cold p95 (the embedded PostgreSQL
restarted: empty shared buffers, fresh connection, the first ``--cold-queries``
queries; the OS page cache is not dropped on this shared box) and hot p95 at
``--clients`` concurrent connections, PostgreSQL RAM (PSS of the server processes).
Every query fetches ``--limit`` candidates as the Retriever's ``dense_depth`` does.

    python -m loadtests.bench_knowledge --n 100000
    python -m loadtests.bench_knowledge --n 1000000 --exact-hot-queries 16 --faiss-max 0

Prints a table; writes ``loadtests/results/bench_knowledge-<n>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from loadtests.knowledge_data import ORG, SYNTH_NOISE, TENANT, chunk_vectors, load, real_embeddings
from serve_app.db.migrations import migrate
from serve_app.store.vectors import ensure_table, shared_hnsw_name, table_name

SLUG = "kb384"
DB = "memserve_kb"
MODEL = "all-minilm-l6-v2-int8"

EXACT = (
    "WITH c AS MATERIALIZED (SELECT v.item_id, v.embedding <=> %(vec)s AS d FROM {v} v"
    " WHERE v.tenant_id = %(t)s AND v.owner = ANY(%(owners)s))"
    " SELECT c.item_id FROM c JOIN memory_items i ON i.id = c.item_id"
    " WHERE i.status = 'active' ORDER BY c.d LIMIT %(limit)s"
)
HNSW = (
    "SELECT v.item_id FROM {v} v JOIN memory_items i ON i.id = v.item_id"
    " WHERE v.tenant_id = %(t)s AND v.owner = %(owner)s AND v.owner LIKE '@%%'"
    " AND i.status = 'active' ORDER BY v.embedding <=> %(vec)s LIMIT %(limit)s"
)


def pct(xs: list[float], p: float) -> float:
    return round(float(np.percentile(np.asarray(xs), p)), 2) if xs else float("nan")


def stats(lat: list[float]) -> dict:
    return {"n": len(lat), "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "max_ms": pct(lat, 100)}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        from serve_app.db.embedded import EmbeddedPostgres

        self.args = args
        self.server = EmbeddedPostgres(args.data_dir)
        self.admin = self.server.start()
        self.dsn = self.admin.replace("/postgres?", f"/{DB}?")
        self.vt = table_name(SLUG)

    def restart(self) -> None:
        """Cold: stop and start the server (shared buffers empty)."""
        self.server.stop()
        self.admin = self.server.start()
        self.dsn = self.admin.replace("/postgres?", f"/{DB}?")

    def connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self.dsn, autocommit=True)
        register_vector(conn)
        return conn

    def query(self, conn: psycopg.Connection, qv: np.ndarray, ef: int | None) -> list:
        p = {"vec": qv, "t": TENANT, "owners": [ORG], "owner": ORG, "limit": self.args.limit}
        if ef is None:
            return [r[0] for r in conn.execute(sql.SQL(EXACT).format(v=sql.Identifier(self.vt)), p)]
        with conn.transaction():
            conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            rows = conn.execute(sql.SQL(HNSW).format(v=sql.Identifier(self.vt)), p).fetchall()
        return [r[0] for r in rows]  # relaxed order: the product re-sorts by similarity

    def explain(self, qv: np.ndarray, ef: int) -> str:
        with self.connect() as conn, conn.transaction():
            conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef)))
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            p = {"vec": qv, "t": TENANT, "owner": ORG, "limit": self.args.limit}
            q = sql.SQL("EXPLAIN ") + sql.SQL(HNSW).format(v=sql.Identifier(self.vt))
            return "\n".join(r[0] for r in conn.execute(q, p))

    def sequential(self, qs: np.ndarray, ef: int | None) -> tuple[list[float], list[list]]:
        lat, res = [], []
        with self.connect() as conn:
            for qv in qs:
                t = time.perf_counter()
                res.append(self.query(conn, qv, ef))
                lat.append((time.perf_counter() - t) * 1000)
        return lat, res

    def concurrent(self, qs: np.ndarray, ef: int | None, total: int) -> dict:
        """``--clients`` threads, each its own connection, ``total`` queries in all."""
        lat: list[float] = []
        lock = threading.Lock()
        nxt = iter(range(total))

        def worker() -> None:
            with self.connect() as conn:
                self.query(conn, qs[0], ef)  # connect + warm, untimed
                while True:
                    with lock:
                        i = next(nxt, None)
                    if i is None:
                        return
                    t = time.perf_counter()
                    self.query(conn, qs[i % len(qs)], ef)
                    with lock:
                        lat.append((time.perf_counter() - t) * 1000)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(self.args.clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        return {**stats(lat), "clients": self.args.clients, "qps": round(len(lat) / wall, 1)}

    def pg_ram_mb(self) -> float:
        """PSS of the postmaster and its children (shared buffers counted once)."""
        root = psutil.Process(self.server.pid)
        total = 0
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a backend that just exited
                total += p.memory_full_info().pss
        return round(total / 2**20, 1)

    def insert_cost(self, owner: str, batches: int, real: np.ndarray) -> dict:
        """Batches of 100 chunks (items + vectors, one transaction each, rolled back)."""
        scope, uid = ("org", None) if owner == ORG else ("user", owner)
        lat = []
        now = datetime.now(UTC)
        vt = sql.Identifier(self.vt)
        with psycopg.connect(self.dsn) as conn:
            register_vector(conn)
            for b in range(batches):
                ids = [uuid.uuid4() for _ in range(100)]
                vecs = chunk_vectors(real, len(real) + 10_000_000 + b * 100, 100, seed=99)
                t = time.perf_counter()
                conn.execute(
                    "INSERT INTO memory_items (id, tenant_id, user_id, scope, type, source,"
                    " content, dedupe_hash, created_at, updated_at)"
                    " SELECT i, %s, %s, %s, 'document_chunk', 'document',"
                    " 'inserted chunk ' || i::text, i::text, %s, %s FROM unnest(%s::uuid[]) i",
                    (TENANT, uid, scope, now, now, ids),
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(vt),
                        [(i, TENANT, owner, v) for i, v in zip(ids, vecs, strict=True)],
                    )
                lat.append(time.perf_counter() - t)
                conn.rollback()
        mean = statistics.fmean(lat)
        return {
            "batches": batches,
            "batch_p50_ms": round(statistics.median(lat) * 1000, 1),
            "chunks_per_s": round(100 / mean, 1),
        }

    def build_hnsw(self) -> dict:
        """The partial index as ``ensure_table`` builds it (CONCURRENTLY), timed."""
        env = os.environ.get("PGOPTIONS")
        os.environ["PGOPTIONS"] = (
            f"-c maintenance_work_mem={self.args.maintenance_work_mem}"
            " -c max_parallel_maintenance_workers=1"
        )
        try:
            t = time.perf_counter()
            ensure_table(self.dsn, SLUG, 384, shared_hnsw=(self.args.m, self.args.efc))
            build = time.perf_counter() - t
        finally:
            if env is None:
                os.environ.pop("PGOPTIONS")
            else:
                os.environ["PGOPTIONS"] = env
        with self.connect() as conn:
            size = conn.execute(
                "SELECT pg_relation_size(%s::regclass)", (shared_hnsw_name(self.vt),)
            ).fetchone()[0]
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(self.vt)))
        return {
            "m": self.args.m,
            "ef_construction": self.args.efc,
            "build_s": round(build, 1),
            "index_mb": round(size / 2**20, 1),
        }


def recall(got: list[list], truth: list[list], k: int = 10) -> float:
    """recall@k of each result's top k (the product re-sorts: order within 100 is moot
    for ids, so the truth's top k is compared with the returned ids' top k by the exact
    ranking, i.e. which of the true top k were returned at all)."""
    return round(
        float(np.mean([len(set(g) & set(t[:k])) / k for g, t in zip(got, truth, strict=True)])), 4
    )


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-user", type=int, default=50)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--efc", type=int, default=64)
    ap.add_argument("--ef-search", default="40,64,100,200")
    ap.add_argument("--limit", type=int, default=100)  # RetrievalSettings.dense_depth
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--queries", type=int, default=100)  # of the 100 real ones (recall)
    ap.add_argument("--cold-queries", type=int, default=50)
    ap.add_argument("--hot-queries", type=int, default=400)
    ap.add_argument("--exact-hot-queries", type=int, default=200)
    ap.add_argument("--insert-batches", type=int, default=20)
    ap.add_argument("--faiss-max", type=int, default=200_000)
    ap.add_argument("--maintenance-work-mem", default="2GB")
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    args.data_dir = args.data_dir or Path(f"/tmp/memserve-bench-knowledge-{args.n}")
    texts, real, qs = real_embeddings(MODEL)
    qs = qs[: args.queries]
    out: dict = {
        "n": args.n,
        "machine": f"{platform.node()} {psutil.cpu_count()} cpus",
        "params": {k: str(v) for k, v in vars(args).items()},
        "vectors": f"{min(args.n, len(real))} real ({MODEL}, BEIR msmarco+dbpedia), "
        f"{max(0, args.n - len(real))} synthesised (real + gaussian noise "
        f"of norm {SYNTH_NOISE}, renormalised); {len(qs)} real queries",
    }
    print(out["vectors"], flush=True)
    b = Bench(args)
    try:
        with psycopg.connect(b.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{DB}"')
        migrate(b.dsn)
        ensure_table(b.dsn, SLUG, 384)
        out["load"] = load(b.dsn, b.vt, texts, real, args.n, args.users, args.per_user)
        print(f"load {out['load']}", flush=True)
        ex: dict = {"insert_org": b.insert_cost(ORG, args.insert_batches, real)}
        b.restart()
        lat, truth = b.sequential(qs, None)  # also the ground truth of recall
        ex["cold"] = {**stats(lat[: args.cold_queries]), "first_ms": round(lat[0], 1)}
        ex["hot"] = b.concurrent(qs, None, args.exact_hot_queries)
        ex["pg_ram_mb"] = b.pg_ram_mb()
        out["exact"] = ex
        print(f"exact {ex}", flush=True)
        hn: dict = b.build_hnsw()
        print(f"hnsw build {hn}", flush=True)
        hn["insert_org"] = b.insert_cost(ORG, args.insert_batches, real)
        hn["insert_personal"] = b.insert_cost("user00000", args.insert_batches, real)
        hn["sweep"] = {}
        for ef in (int(x) for x in args.ef_search.split(",")):
            lat, got = b.sequential(qs, ef)
            hn["sweep"][ef] = {**stats(lat), "recall_at_10": recall(got, truth)}
            print(f"  ef_search {ef}: {hn['sweep'][ef]}", flush=True)
        ok = [ef for ef, r in hn["sweep"].items() if r["recall_at_10"] >= 0.95]
        ef = min(ok) if ok else max(hn["sweep"])
        hn["ef_search"] = ef
        hn["plan_uses_index"] = shared_hnsw_name(b.vt) in b.explain(qs[0], ef)
        b.restart()
        lat, _ = b.sequential(qs[: args.cold_queries], ef)
        hn["cold"] = {**stats(lat), "first_ms": round(lat[0], 1)}
        hn["hot"] = b.concurrent(qs, ef, args.hot_queries)
        hn["pg_ram_mb"] = b.pg_ram_mb()
        out["hnsw"] = hn
        print(f"hnsw {hn}", flush=True)
    finally:
        b.server.stop()
    if args.faiss_max:
        org = chunk_vectors(real, 0, min(args.n, args.faiss_max), seed=3)
        out["faiss"] = faiss_alt(org, qs, args)
        if org.shape[0] < args.n:
            out["faiss"]["note"] = f"built on the first {org.shape[0]} chunks only"
        print(f"faiss {out['faiss']}", flush=True)
    table(out)
    path = Path(__file__).parent / "results" / f"bench_knowledge-{args.n}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {path}")


def table(out: dict) -> None:
    ex, hn, fa = out["exact"], out["hnsw"], out.get("faiss", {})
    ef = hn["ef_search"]
    fk = next((k for k in fa if k.startswith("ef")), None)
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


if __name__ == "__main__":
    main()
