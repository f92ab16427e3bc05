"""Retrieval quality through the HTTP API: LoCoMo evidence recall and BEIR nDCG/recall.

Stores the corpora of ``../shared/data`` as memories (one user per conversation or
dataset, via ``/v1/memories/batch``), runs every query in each search mode
(hybrid, and the dense-only and lexical-only baselines) and prints:

- LoCoMo dev: evidence recall@1/5/10/20 per question category (each turn stored as
  "Speaker: text" with its dia_id in metadata; recall = share of evidence ids retrieved);
- BEIR sets: nDCG@10, recall@10 and recall@100.

Without ``--host`` it starts the real service (``serve_app/testing/service.py``) in a temporary
data directory with rate limiting off; with ``--host URL --key KEY`` it uses a running
one (a service key; mind its rate limit). Writes ``loadtests/results/eval_retrieval.json``.

    python loadtests/eval_retrieval.py                      # all sets, all modes
    python loadtests/eval_retrieval.py --sets locomo --max-queries 100
    python loadtests/eval_retrieval.py --sets locomo --modes hybrid --reference-date
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
MODES = ("hybrid", "dense", "lexical")
MAX_CHARS = 8000


# ---------------------------------------------------------------- HTTP


class Api:
    def __init__(self, base_url: str, key: str, workers: int = 4) -> None:
        self.client = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120
        )
        self.pool = ThreadPoolExecutor(workers)

    def store(self, user: str, items: list[dict]) -> int:
        """``items`` written in their order, a batch of 100 at a time: the retriever reads
        a memory's neighbours in write order, so batches posted at once (interleaved
        differently on every run) would rank some questions differently run to run."""
        stored = 0
        for i in range(0, len(items), 100):
            chunk = items[i : i + 100]
            r = self.client.post("/v1/memories/batch", json={"user_id": user, "items": chunk})
            r.raise_for_status()
            stored += len(r.json()["memories"])
        return stored

    def search_many(
        self, user: str, queries: list[str], top_k: int, mode: str, **extra: object
    ) -> list[list]:
        def one(text: str) -> list:
            body = {"user_id": user, "query": text, "top_k": top_k, "mode": mode, **extra}
            r = self.client.post("/v1/search", json=body)
            r.raise_for_status()
            return r.json()["results"]

        return list(self.pool.map(one, queries))


# ---------------------------------------------------------------- LoCoMo


def evidence_ids(raw: list) -> set[str]:
    out: set[str] = set()
    for e in raw or []:
        out.update(t for t in re.split(r"[;\s]+", str(e)) if t)
    return out


def session_date(raw: str | None) -> str | None:
    """LoCoMo's "1:56 pm on 8 May, 2023" as ISO 8601 ("2023-05-08T13:56:00"); None if unparsable."""
    try:
        return datetime.strptime((raw or "").strip(), "%I:%M %p on %d %B, %Y").isoformat()
    except ValueError:
        return None


def locomo_items(conv: dict) -> list[dict]:
    """One memory per turn, "Speaker: text", with its dia_id and its session's date in metadata.

    ``session_date`` is what a chat platform knows about a turn: when it was said
    (the retriever's time signal reads it, see serve_app/retrieval/signals.py).
    """
    c = conv["conversation"]
    items = []
    for key in sorted(c, key=lambda k: (len(k), k)):
        if re.fullmatch(r"session_\d+", key):
            when = session_date(c.get(f"{key}_date_time"))
            for turn in c[key]:
                text = f"{turn['speaker']}: {turn['text']}"[:MAX_CHARS]
                meta = {"dia_id": turn["dia_id"]} | ({"session_date": when} if when else {})
                items.append({"content": text, "metadata": meta})
    return items


def last_session_day(conv: dict) -> str | None:
    """The day of the conversation's last session (ISO 8601): when its questions are
    asked, so their "last year" or "two weeks ago" are read against it."""
    c = conv["conversation"]
    days = [session_date(c.get(k)) for k in c if re.fullmatch(r"session_\d+_date_time", k)]
    days = [d for d in days if d]
    return max(days)[:10] if days else None


def locomo_qa(conv: dict, max_queries: int | None) -> list[dict]:
    qa = [q for q in conv["qa"] if evidence_ids(q.get("evidence"))]
    return qa[:max_queries] if max_queries else qa


KS = (1, 5, 10, 20)


class LocomoScores:
    """Evidence recall@k by mode, category and conversation."""

    def __init__(self) -> None:
        # mode -> group ("all", category, "conv:<id>") -> k -> [recall]
        self.recalls: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        # mode -> one row per question, so two runs can be compared question by question
        self.questions: dict = defaultdict(list)

    def add(self, mode: str, conv_id: str, q: dict, got: list) -> None:
        gold = evidence_ids(q["evidence"])
        row = {"conv": conv_id, "category": q["category"], "question": q["question"]}
        for k in KS:
            r = len(gold & set(got[:k])) / len(gold)
            row[f"R@{k}"] = round(r, 4)
            for group in (str(q["category"]), "all", f"conv:{conv_id}"):
                self.recalls[mode][group][k].append(r)
        self.questions[mode].append(row)

    def report(self, modes) -> dict:
        return {
            mode: {
                g: {f"R@{k}": round(sum(v) / len(v), 4) for k, v in by_k.items()}
                | {"n": len(by_k[1])}
                for g, by_k in sorted(self.recalls[mode].items())
            }
            for mode in modes
        }


def eval_locomo(
    api: Api, run: str, modes, max_queries: int | None, reference: bool = False
) -> dict:
    convs = json.loads((DATA / "locomo-dev.json").read_text())
    scores = LocomoScores()
    stored = 0
    for conv in convs:
        user = f"eval-{run}-locomo-{conv['sample_id']}"
        stored += api.store(user, locomo_items(conv))
        qa = locomo_qa(conv, max_queries)
        for mode in modes:
            extra = {"reference_date": last_session_day(conv)} if reference else {}
            results = api.search_many(user, [q["question"] for q in qa], max(KS), mode, **extra)
            for q, res in zip(qa, results, strict=True):
                scores.add(mode, conv["sample_id"], q, [r["metadata"].get("dia_id") for r in res])
    return {"memories": stored, "modes": scores.report(modes), "questions": scores.questions}


# ---------------------------------------------------------------- BEIR


def read_jsonl(path: Path) -> list[dict]:
    # split on "\n" only: str.splitlines() also splits inside strings at U+2028 and the
    # like, which JSON leaves unescaped (agentset_msmarco has some)
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or not parts[2].strip().lstrip("-").isdigit():
            continue  # header line (dbpedia has one, msmarco not)
        qrels[parts[0]][parts[1]] = int(parts[2])
    return qrels


def ndcg_at(got: list[str], rel: dict[str, int], k: int = 10) -> float:
    dcg = sum(
        (2 ** rel.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(got[:k]) if rel.get(d)
    )
    ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def eval_beir(api: Api, run: str, name: str, modes, max_queries: int | None) -> dict:
    root = DATA / "ir" / name
    docs = read_jsonl(root / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    qrels = {q: r for q, r in read_qrels(root / "qrels" / "test.tsv").items() if q in queries}
    qids = [q for q in qrels if any(g > 0 for g in qrels[q].values())]
    if max_queries:
        qids = qids[:max_queries]
    user = f"eval-{run}-{name}"
    items = []
    for d in docs:
        text = ". ".join(t for t in (d.get("title", ""), d.get("text", "")) if t)[:MAX_CHARS]
        items.append({"content": text or "(empty)", "metadata": {"doc_id": str(d["_id"])}})
    t0 = time.perf_counter()
    stored = api.store(user, items)
    store_s = time.perf_counter() - t0
    out = {"memories": stored, "store_s": round(store_s, 1), "queries": len(qids), "modes": {}}
    for mode in modes:
        results = api.search_many(user, [queries[q] for q in qids], 100, mode)
        nd, r10, r100 = [], [], []
        for q, res in zip(qids, results, strict=True):
            got = [r["metadata"].get("doc_id") for r in res]
            rel = qrels[q]
            relevant = {d for d, g in rel.items() if g > 0}
            nd.append(ndcg_at(got, rel))
            r10.append(len(relevant & set(got[:10])) / len(relevant))
            r100.append(len(relevant & set(got[:100])) / len(relevant))
        out["modes"][mode] = {
            "nDCG@10": round(sum(nd) / len(nd), 4),
            "R@10": round(sum(r10) / len(r10), 4),
            "R@100": round(sum(r100) / len(r100), 4),
        }
    return out


# ---------------------------------------------------------------- main


def print_tables(report: dict) -> None:
    if "locomo" in report:
        print("\nLoCoMo dev: evidence recall by category")
        print(f"{'mode':<9}{'cat':>10}{'n':>6}{'R@1':>8}{'R@5':>8}{'R@10':>8}{'R@20':>8}")
        for mode, cats in report["locomo"]["modes"].items():
            for cat, r in cats.items():
                print(
                    f"{mode:<9}{cat:>5}{r['n']:>6}{r['R@1']:>8.3f}{r['R@5']:>8.3f}"
                    f"{r['R@10']:>8.3f}{r['R@20']:>8.3f}"
                )
    for name, res in report.items():
        if name == "locomo" or not isinstance(res, dict) or "modes" not in res:
            continue
        print(f"\n{name} ({res['memories']} docs, {res['queries']} queries)")
        print(f"{'mode':<9}{'nDCG@10':>9}{'R@10':>8}{'R@100':>8}")
        for mode, r in res["modes"].items():
            print(f"{mode:<9}{r['nDCG@10']:>9.4f}{r['R@10']:>8.4f}{r['R@100']:>8.4f}")


def setting(word: str) -> tuple[str, str]:
    """``NAME=VALUE`` of ``--env``, as an argparse type (a malformed word is a usage error)."""
    name, sep, value = word.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {word!r}")
    return name, value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--host", help="base URL of a running service (default: start one)")
    ap.add_argument("--key", help="service API key for --host")
    ap.add_argument("--sets", default="locomo,agentset_msmarco,agentset_dbpedia")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--max-queries", type=int, default=None, help="per conversation / set")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument(
        "--reference-date",
        action="store_true",
        help="LoCoMo: each search's reference_date is its conversation's last session day",
    )
    ap.add_argument(
        "--env",
        nargs="*",
        default=[],
        type=setting,
        metavar="NAME=VALUE",
        help="settings of the service this run starts (e.g. MEMSERVE_PERIOD_WEIGHT=0)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "loadtests" / "results")
    ap.add_argument("--name", help="result file name (default eval_retrieval.json)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    sets = [s for s in args.sets.split(",") if s]

    svc = None
    if args.host:
        if not args.key:
            ap.error("--key is required with --host")
        base, key = args.host, args.key
    else:
        from serve_app.testing.service import ServiceProcess

        key = "msk_eval_" + secrets.token_hex(8)
        svc = ServiceProcess(
            Path(tempfile.mkdtemp(prefix="memserve-eval-")),
            key,
            extra_env={"MEMSERVE_RATE_LIMIT_PER_S": "0", **dict(args.env)},
        )
        print("starting the service ...", flush=True)
        svc.start()
        base = svc.base_url
    run = secrets.token_hex(3)
    report: dict = {"run": run, "modes": modes}
    api = Api(base, key, args.workers)
    t0 = time.perf_counter()
    try:
        for s in sets:
            print(f"evaluating {s} ...", flush=True)
            if s == "locomo":
                report["locomo"] = eval_locomo(
                    api, run, modes, args.max_queries, args.reference_date
                )
            else:
                report[s] = eval_beir(api, run, s, modes, args.max_queries)
    finally:
        if svc is not None:
            svc.stop()
    report["elapsed_s"] = round(time.perf_counter() - t0, 1)
    print_tables(report)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (args.name or "eval_retrieval.json")
    path.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {path} ({report['elapsed_s']}s)")


if __name__ == "__main__":
    main()
