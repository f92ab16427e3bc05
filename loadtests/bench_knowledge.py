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
from loadtests.knowledge_report import faiss_alt, stats, table
from loadtests.stats import percentile
from serve_app.db.migrations import migrate
from serve_app.settings import Settings
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


def loaded(dsn: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT count(*) FROM memory_items").fetchone()[0]
    except psycopg.Error:
        return -1


class BuildCapped(Exception):
    """The HNSW build ran past ``--build-cap-s``."""


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
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")  # as the product
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
            "batch_p50_ms": round(percentile(lat, 50) * 1000, 1),
            "chunks_per_s": round(100 / mean, 1),
        }

    def build_hnsw(self) -> dict:
        """The partial index as ``ensure_table`` builds it (CONCURRENTLY), timed; with
        ``--build-cap-s`` cancelled at the cap, its progress (pgvector reports tuples
        done) giving a labelled extrapolation of the whole build."""
        a = self.args
        env = os.environ.get("PGOPTIONS")
        os.environ["PGOPTIONS"] = (
            f"-c maintenance_work_mem={a.maintenance_work_mem}"
            " -c max_parallel_maintenance_workers=1"
            + (f" -c statement_timeout={a.build_cap_s * 1000}" if a.build_cap_s else "")
        )
        progress: list[tuple[float, int, int]] = []
        stop = threading.Event()

        def poll() -> None:
            with self.connect() as conn:
                while not stop.wait(5):
                    row = conn.execute(
                        "SELECT tuples_done, tuples_total FROM pg_stat_progress_create_index"
                    ).fetchone()
                    if row and row[1]:
                        progress.append((time.perf_counter() - t, int(row[0]), int(row[1])))

        t = time.perf_counter()
        poller = threading.Thread(target=poll)
        poller.start()
        out = {"m": a.m, "ef_construction": a.efc}
        try:
            ensure_table(self.dsn, SLUG, 384, shared_hnsw=(a.m, a.efc))
        except psycopg.errors.QueryCanceled:
            out["capped_at_s"] = a.build_cap_s
            if progress and progress[-1][1]:  # none reported: no extrapolation
                el, done, total = progress[-1]
                out.update(
                    tuples_done=done,
                    tuples_total=total,
                    extrapolated_build_s=round(el * total / done),
                )
            with self.connect() as conn:  # the cancelled CONCURRENTLY build leaves it invalid
                conn.execute(f"DROP INDEX IF EXISTS {shared_hnsw_name(self.vt)}")
            return out
        finally:
            stop.set()
            poller.join()
            if env is None:
                os.environ.pop("PGOPTIONS")
            else:
                os.environ["PGOPTIONS"] = env
        out["build_s"] = round(time.perf_counter() - t, 1)
        with self.connect() as conn:
            size = conn.execute(
                "SELECT pg_relation_size(%s::regclass)", (shared_hnsw_name(self.vt),)
            ).fetchone()[0]
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(self.vt)))
        out["index_mb"] = round(size / 2**20, 1)
        return out


def recall(got: list[list], truth: list[list], k: int = 10) -> float:
    """recall@k of each result's top k (the product re-sorts: order within 100 is moot
    for ids, so the truth's top k is compared with the returned ids' top k by the exact
    ranking, i.e. which of the true top k were returned at all)."""
    return round(
        float(np.mean([len(set(g) & set(t[:k])) / k for g, t in zip(got, truth, strict=True)])), 4
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--per-user", type=int, default=50)
    shared = Settings().retrieval  # the product's shared-index parameters by default
    ap.add_argument("--m", type=int, default=shared.pg_hnsw_shared_m)
    ap.add_argument("--efc", type=int, default=shared.pg_hnsw_shared_ef_construction)
    ap.add_argument("--ef-search", default="40,100,400,1000")  # 1000: the default
    ap.add_argument("--limit", type=int, default=100)  # RetrievalSettings.dense_depth
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--queries", type=int, default=100)  # of the 100 real ones (recall)
    ap.add_argument("--cold-queries", type=int, default=50)
    ap.add_argument("--hot-queries", type=int, default=400)
    ap.add_argument("--exact-hot-queries", type=int, default=200)
    ap.add_argument("--insert-batches", type=int, default=20)
    ap.add_argument("--faiss-max", type=int, default=200_000)
    ap.add_argument("--maintenance-work-mem", default="2GB")
    ap.add_argument("--reuse", action="store_true")  # keep a loaded database of this size
    ap.add_argument("--build-cap-s", type=int, default=0)  # 0: no cap
    ap.add_argument("--build-deadline", default="")  # UTC HH:MM: the cap ends the build then
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
        if args.reuse and loaded(b.dsn) == args.n + args.users * args.per_user:
            ensure_table(b.dsn, SLUG, 384)  # drops a shared index an earlier run built
            out["load"] = {"reused": True}
        else:
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
        if args.build_deadline:  # cap the build so the run ends by then (UTC HH:MM)
            hh, mm = (int(x) for x in args.build_deadline.split(":"))
            end = datetime.now(UTC).replace(hour=hh, minute=mm, second=0)
            args.build_cap_s = max(30, int((end - datetime.now(UTC)).total_seconds()))
        hn: dict = b.build_hnsw()
        print(f"hnsw build {hn}", flush=True)
        out["hnsw"] = hn
        if "build_s" not in hn:
            raise BuildCapped
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
    except BuildCapped:
        print("HNSW build capped: no HNSW measurements", flush=True)
    finally:
        b.server.stop()
    if args.faiss_max:
        org = chunk_vectors(real, 0, min(args.n, args.faiss_max), seed=3)
        out["faiss"] = faiss_alt(org, qs, args)
        if org.shape[0] < args.n:
            out["faiss"]["note"] = f"built on the first {org.shape[0]} chunks only"
        print(f"faiss {out['faiss']}", flush=True)
    path = Path(__file__).parent / "results" / f"bench_knowledge-{args.n}.json"
    path.write_text(json.dumps(out, indent=2, default=str))
    table(out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
