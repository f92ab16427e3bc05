"""Retrieval quality in one process: the same data and metrics as eval_retrieval, without Ray.

Drives the plain-Python :class:`serve_app.retrieval.retriever.Retriever` against an
embedded PostgreSQL with the service's encoder, so retrieval changes can be measured
on a busy machine in a minute or two. Vectors are cached on disk per model (and
re-quantisation recipe) and text (``--cache``), so a second run embeds nothing.
Settings overrides (``--set retrieval.fusion_alpha=0.5``) try variants without
editing code. The number that counts stays the through-the-API one
(``python -m loadtests.eval_retrieval``).

    python -m loadtests.eval_local --sets locomo
    python -m loadtests.eval_local --sets locomo --set retrieval.entity_weight=0
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadtests.eval_retrieval import (  # noqa: E402
    DATA,
    KS,
    MAX_CHARS,
    LocomoScores,
    locomo_items,
    locomo_qa,
    ndcg_at,
    print_tables,
    read_jsonl,
    read_qrels,
)
from loadtests.stats import percentile  # noqa: E402
from serve_app.db.embedded import EmbeddedPostgres  # noqa: E402
from serve_app.db.migrations import migrate  # noqa: E402
from serve_app.db.pool import open_pool  # noqa: E402
from serve_app.retrieval.query import SearchQuery  # noqa: E402
from serve_app.retrieval.retriever import Retriever  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.store import NewMemory, Owner  # noqa: E402
from serve_app.store.guarded import GuardedWriter  # noqa: E402
from serve_app.store.vectors import ensure_table  # noqa: E402

SLUG = "evallocal"
TENANT = "eval"


def _variant(model: str) -> str:
    """The model and, for a re-quantised one, its recipe digest: a new recipe, new vectors."""
    from models.requantize import RECIPES
    from models.resolve import get_spec

    mode = get_spec(model).requantize
    return f"{model}-{mode}-{RECIPES[mode].digest()}" if mode else model


class Vectors:
    """The service's encoder with an on-disk cache of (model, query?, text) -> vector."""

    def __init__(self, model: str, cache: Path) -> None:
        from models import load_encoder

        self.model, self.dir = model, cache / _variant(model)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._encoder = None
        self._load = lambda: load_encoder(model, threads=1)

    def __call__(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        h = hashlib.sha256(json.dumps([is_query, texts]).encode()).hexdigest()[:24]
        path = self.dir / f"{h}.npy"
        if path.exists():
            return np.load(path)
        if self._encoder is None:
            self._encoder = self._load()
        x = np.asarray(self._encoder.encode(texts, is_query=is_query), dtype=np.float32)
        np.save(path, x)
        return x


async def _store(store: GuardedWriter, user: str, items: list[dict], vecs: Vectors) -> None:
    x = vecs([i["content"] for i in items])
    news = [NewMemory(content=i["content"], metadata=i.get("metadata") or {}) for i in items]
    for a in range(0, len(news), 500):
        await store.add(Owner(TENANT, user), news[a : a + 500], x[a : a + 500], actor="eval")


async def _search(core: Retriever, user: str, texts: list[str], k: int, mode: str, vecs: Vectors):
    qv = vecs(texts, is_query=True)
    out = []
    for text, v in zip(texts, qv, strict=True):
        q = SearchQuery(tenant_id=TENANT, user_id=user, top_k=k, text=text, mode=mode)
        out.append(await core.search(q, v))
    for text, v in zip(texts, qv, strict=True):  # again, timed: every owner is cached now
        q = SearchQuery(tenant_id=TENANT, user_id=user, top_k=k, text=text, mode=mode)
        t0 = time.perf_counter()
        await core.search(q, v)
        LATENCY_MS.append((time.perf_counter() - t0) * 1000)
    return out


LATENCY_MS: list[float] = []  # hot searches of this run (second pass over the queries)


async def evaluate(dsn: str, settings: Settings, sets, modes, vecs: Vectors, maxq) -> dict:
    pool = await open_pool(dsn, settings, min_size=1)
    await pool.wait()
    store = GuardedWriter(pool, SLUG, max_chars=MAX_CHARS)  # the one write path
    core = Retriever(pool, SLUG, settings)
    report: dict = {"modes": modes}
    try:
        for s in sets:
            if s == "locomo":
                scores, stored = LocomoScores(), 0
                for conv in json.loads((DATA / "locomo-dev.json").read_text()):
                    user = f"locomo-{conv['sample_id']}"
                    items = locomo_items(conv)
                    await _store(store, user, items, vecs)
                    stored += len(items)
                    qa = locomo_qa(conv, maxq)
                    for mode in modes:
                        res = await _search(
                            core, user, [q["question"] for q in qa], max(KS), mode, vecs
                        )
                        for q, r in zip(qa, res, strict=True):
                            scores.add(
                                mode, conv["sample_id"], q, [m["metadata"].get("dia_id") for m in r]
                            )
                report["locomo"] = {"memories": stored, "modes": scores.report(modes)}
            else:
                report[s] = await _beir(store, core, s, modes, vecs, maxq)
    finally:
        await core.close()
        await pool.close()
    return report


async def _beir(store, core, name: str, modes, vecs: Vectors, maxq) -> dict:
    root = DATA / "ir" / name
    queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    qrels = {q: r for q, r in read_qrels(root / "qrels" / "test.tsv").items() if q in queries}
    qids = [q for q in qrels if any(g > 0 for g in qrels[q].values())][: maxq or None]
    items = []
    for d in read_jsonl(root / "corpus.jsonl"):
        text = ". ".join(t for t in (d.get("title", ""), d.get("text", "")) if t)[:MAX_CHARS]
        items.append({"content": text or "(empty)", "metadata": {"doc_id": str(d["_id"])}})
    await _store(store, name, items, vecs)
    out = {"memories": len(items), "queries": len(qids), "modes": {}}
    for mode in modes:
        res = await _search(core, name, [queries[q] for q in qids], 100, mode, vecs)
        nd, r10, r100 = [], [], []
        for q, r in zip(qids, res, strict=True):
            got, rel = [m["metadata"].get("doc_id") for m in r], qrels[q]
            relevant = {d for d, g in rel.items() if g > 0}
            nd.append(ndcg_at(got, rel))
            r10.append(len(relevant & set(got[:10])) / len(relevant))
            r100.append(len(relevant & set(got[:100])) / len(relevant))
        out["modes"][mode] = {
            k: round(sum(v) / len(v), 4)
            for k, v in (("nDCG@10", nd), ("R@10", r10), ("R@100", r100))
        }
    return out


def _overrides(pairs: list[str]) -> dict[str, dict]:
    groups: dict[str, dict] = {}
    for p in pairs:
        key, value = p.split("=", 1)
        group, field = key.split(".", 1)
        groups.setdefault(group, {})[field] = (
            json.loads(value) if value[:1] in "[{0123456789.-tfn" else value
        )
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", default="locomo,agentset_msmarco,agentset_dbpedia")
    ap.add_argument("--modes", default="hybrid")
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--set", action="append", default=[], help="group.field=value")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "memserve-eval-vectors"
    )
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = ap.parse_args()
    settings = Settings().with_(**_overrides(args.set))
    vecs = Vectors(settings.embed.model, args.cache)
    dim = vecs(["probe"]).shape[1]
    with tempfile.TemporaryDirectory(prefix="memserve-evallocal-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            ensure_table(dsn, SLUG, dim)
            t0 = time.perf_counter()
            report = asyncio.run(
                evaluate(
                    dsn,
                    settings,
                    args.sets.split(","),
                    args.modes.split(","),
                    vecs,
                    args.max_queries,
                )
            )
        finally:
            pg.stop()
    report["overrides"], report["elapsed_s"] = args.set, round(time.perf_counter() - t0, 1)
    report["search_ms"] = {f"p{p}": round(percentile(LATENCY_MS, p), 3) for p in (50, 95, 99)}
    print("hot search ms (in process):", report["search_ms"])
    print_tables(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
