"""Context levers on the foreign implicit-needs set, in process: seconds per setting.

bench_context.py measures blocks through the service (Ray, HTTP, a fresh service per
variant: minutes). Choosing a lever's setting needs many tries, so this runs the same
composition root in process (real PostgreSQL, the real int8 encoder) over
``../shared/data/implicit_needs`` (loadtests/implicit_needs.py): each try is a set of
``ContextSettings`` fields, scored by bench_context's rules per half (u01-u15 calibrate,
u16-u30 report) and per kind, for typed and untyped adds. Settings are chosen on the
calibration half; the report half is printed beside it and never used to choose.

    python -m loadtests.context_levers --tries '{}' '{"evidence_fill": 2}'
    python -m loadtests.context_levers --half calibration      # print one half only
    python -m loadtests.context_levers --data team             # the team's own set
    python -m loadtests.context_levers --locomo 20             # + LoCoMo at 250/1000/4000

``--data team`` runs loadtests/data/context_bench.json (the set the gate was tuned on:
even positions calibrate, odd ones are held out) the same way. ``--locomo N`` adds LoCoMo
dev (N questions per conversation; ``--locomo-convs`` picks conversations): the share of
a question's evidence turns in the block at 250, 1000 and 4000 tokens, the tokens used,
and plain search R@k beside it; and the same block judged by a perfect re-scoring step
of ``--rerank-pool`` candidates (the ceiling of the ``rerank`` slot through the
builder's own path). ``--rerank-dir DIR`` judges every block with an operator's ONNX
cross-encoder too (the service's step, its default bar): the sources gain
``<source>+onnx<pool>`` rows, LoCoMo ``onnx<pool>@<budget>``.

Prints a row per try and source, writes loadtests/results/context_levers-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import implicit_needs  # noqa: E402
from loadtests.bench_context import DATA, HALVES, LOCOMO, score  # noqa: E402
from loadtests.context_inprocess import (  # noqa: E402
    add_conversation,
    block_outcome,
    load_labelled,
)
from loadtests.context_metrics import Labels  # noqa: E402
from loadtests.harness import scratch_database, write_json  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.embedding_model import ModelFacts  # noqa: E402
from serve_app.retrieval.query import SearchQuery  # noqa: E402
from serve_app.settings import Settings  # noqa: E402
from serve_app.store import NewMemory, Owner  # noqa: E402
from serve_app.testing.inprocess import in_process_services  # noqa: E402
from serve_app.text import count_tokens  # noqa: E402

SLUG = "all-minilm-l6-v2-int8"
TENANT = "levers"
BUDGETS = (250, 1000, 4000)
SEARCH_KS = (10, 20, 30, 50, 100)
TOP_TOKENS_K = 30  # the tokens of search's top 30: about what a 1000-token block can hold
ORACLE_BUDGET = 1000
COLUMNS = ("needed_recall", "unneeded_share", "retrieved_unneeded_share", "tokens_mean")


async def load(services: Any, data: dict, prefix: str, typed: bool) -> tuple[dict, dict]:
    """Every user's memories added as the API adds them; owners and labels by user."""
    owners, labels = {}, {}
    for u in data["users"]:
        owner = Owner(TENANT, f"{prefix}-{u['id']}")
        kinds = [(m["type"] or "semantic") if typed else "semantic" for m in u["memories"]]
        items = [NewMemory(m["content"], k) for m, k in zip(u["memories"], kinds, strict=True)]
        rows = await services.memories.add(owner, items, actor="bench")
        lab = Labels({str(r["id"]): m["key"] for m, r in zip(u["memories"], rows, strict=True)})
        lab.profile_keys = {m["key"] for m in u["memories"] if m["cls"]}
        owners[u["id"]], labels[u["id"]] = owner, lab
    return owners, labels


class PerfectJudge:
    """A re-scoring step that knows the answer (the question's evidence turns score 1,
    every other candidate 0, bar 0.5): the block a judge of its ``pool`` could reach
    through the builder's own path (its searches' depth, dedupe, budget), which is the
    ceiling of any real back-end of that pool. A benchmark device, never a back-end."""

    bar: float | None = 0.5

    def __init__(self, gold: set[str], pool: int) -> None:
        self.gold, self.pool = gold, pool

    async def __call__(self, rows: list[dict]) -> list[dict]:
        head, tail = rows[: self.pool], rows[self.pool :]
        for r in head:
            r["rerank_score"] = float((r.get("metadata") or {}).get("dia_id") in self.gold)
        return sorted(head, key=lambda r: -r["rerank_score"]) + tail


def judges(args: argparse.Namespace | None) -> dict[str, Any]:
    """name -> (gold, question, owner) -> a rerank step, for the judged blocks ``locomo``
    measures beside the rule's: the perfect judge always; ``--rerank-dir``: an
    operator's ONNX cross-encoder through the service's own step, at its default bar."""
    from serve_app.retrieval.rerank import build_reranker
    from serve_app.services.rerank import RerankStep
    from serve_app.settings import RerankSettings
    from serve_app.store.llm_spend import CallTag

    pool = args.rerank_pool if args is not None else max(SEARCH_KS)
    out: dict[str, Any] = {
        f"perfect_judge{pool}": lambda gold, question, owner: PerfectJudge(gold, pool)
    }
    if args is not None and args.rerank_dir:
        rs = RerankSettings(backends=["onnx"], onnx_dir=args.rerank_dir, max_candidates=pool)
        reranker = build_reranker(rs, None)

        def onnx(gold: set[str], question: str, owner: Owner) -> RerankStep:
            tag = CallTag(owner.tenant_id, owner.user_id, "rerank")
            return RerankStep(reranker, "onnx", question, tag)

        out[f"onnx{pool}"] = onnx
    return out


async def locomo(
    services: Any,
    queries: int,
    prefix: str,
    args: argparse.Namespace | None = None,
    steps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """LoCoMo dev evidence in the block at each budget, with the tokens it used, beside
    plain search R@k and the tokens of search's top 30 (what a block of that size could
    carry by rank alone), and what a perfect re-ranker of search's top 100 would fit in
    1000 tokens (the evidence first, then by rank): the ceiling of a re-scoring stage.
    The block is also built with each re-scoring step of ``steps`` (default
    :func:`judges`; their score admits in place of the evidence rule):
    ``<judge>@<budget>``."""
    from loadtests.eval_retrieval import evidence_ids, locomo_qa

    convs = json.loads(LOCOMO.read_text())
    if args is not None and args.locomo_convs:
        convs = [c for c in convs if c["sample_id"] in args.locomo_convs.split(",")]
    steps = judges(args) if steps is None else steps  # a caller's: one cross-encoder load
    keys = [f"block@{b}" for b in BUDGETS] + [f"{j}@{b}" for j in steps for b in BUDGETS]
    got: dict[str, list[float]] = {k: [] for k in keys}
    used: dict[str, list[int]] = {k: [] for k in keys}
    search: dict[int, list[float]] = {k: [] for k in SEARCH_KS}
    top_tokens: list[int] = []
    oracle: list[float] = []
    for conv in convs:
        owner = await add_conversation(services, conv, TENANT, prefix)
        for q in locomo_qa(conv, queries or None):
            gold = evidence_ids(q["evidence"])
            for b in BUDGETS:
                for name, judge in {"block": None, **steps}.items():
                    step = judge(gold, q["question"], owner) if judge is not None else None
                    block = await services.context.build(
                        owner, q["question"], token_budget=b, rerank=step
                    )
                    shown = block.memories + block.profile
                    ids = {(m.get("metadata") or {}).get("dia_id") for m in shown}
                    got[f"{name}@{b}"].append(len(gold & ids) / len(gold))
                    used[f"{name}@{b}"].append(block.tokens)
            query = SearchQuery(TENANT, owner.user_id, top_k=max(SEARCH_KS), text=q["question"])
            [rows] = await services.memories.search_many([query])
            dia = [(m.get("metadata") or {}).get("dia_id") for m in rows]
            for k in SEARCH_KS:
                search[k].append(len(gold & set(dia[:k])) / len(gold))
            top_tokens.append(sum(count_tokens(m["content"]) for m in rows[:TOP_TOKENS_K]))
            oracle.append(perfect_rerank(rows, dia, gold, ORACLE_BUDGET))
    out: dict[str, Any] = {"questions": len(search[10])}
    out |= {f"search_R@{k}": mean(v) for k, v in search.items()}
    out[f"search_top{TOP_TOKENS_K}_tokens_mean"] = mean(top_tokens)
    out[f"perfect_rerank_top{max(SEARCH_KS)}@{ORACLE_BUDGET}"] = mean(oracle)
    for key in got:
        out[key] = {"evidence": mean(got[key]), "tokens_mean": mean(used[key])}
    return out


def perfect_rerank(rows: list[dict], dia: list[str | None], gold: set[str], budget: int) -> float:
    """The share of ``gold`` a block of ``budget`` tokens holds when the candidates are
    ordered evidence first, then by rank: no re-ranker of these candidates does better."""
    order = sorted(range(len(rows)), key=lambda i: (dia[i] not in gold, i))
    spent, shown = 0, set()
    for i in order:
        tokens = count_tokens(rows[i]["content"])
        if spent + tokens > budget:
            break
        spent += tokens
        shown.add(dia[i])
    return len(gold & shown) / len(gold)


def mean(xs: list) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


async def one_try(
    n: int, fields: dict[str, Any], dsn: str, encoder: Any, data: dict, args: argparse.Namespace
) -> dict:
    settings = Settings().with_(context=fields)
    model = ModelFacts.of(encoder.spec)
    out: dict[str, Any] = {"settings": fields}
    steps = judges(args)
    async with in_process_services(settings, model, dsn, encoder) as services:
        for source in args.sources:
            if args.data == "team":
                owners, labels = await load_labelled(
                    services, data, f"t{n}{source}", source == "typed", TENANT
                )
            else:
                owners, labels = await load(services, data, f"t{n}{source}", source == "typed")
            # the rule's blocks, then each real judge's (a perfect one needs the answer)
            for judge in [None, *[j for j in steps if not j.startswith("perfect")]]:
                name = source if judge is None else f"{source}+{judge}"
                outs = []
                for i, msg in enumerate(data["messages"]):
                    owner = owners[msg["user"]]
                    step = steps[judge](set(), msg["text"], owner) if judge else None
                    block = await services.context.build(owner, msg["text"], rerank=step)
                    lab = labels[msg["user"]]
                    o = block_outcome(lab, msg["needs"], block, msg.get("helpful", ()))
                    outs.append((i, msg["user"], o))
                by_source = {(name, u): lab for u, lab in labels.items()}
                out[name] = score(outs, by_source, name, data)
        if args.locomo >= 0:
            out["locomo"] = await locomo(services, args.locomo, f"t{n}", args, steps)
    return out


def row(name: str, figures: dict) -> str:
    return f"{name:44} " + " ".join(f"{figures[c]:>8}" for c in COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tries", nargs="*", default=["{}"], help="ContextSettings fields (JSON)")
    ap.add_argument("--sources", default="typed,untyped")
    ap.add_argument("--half", choices=(*HALVES, "both"), default="both")
    ap.add_argument("--data", choices=("implicit", "team"), default="implicit")
    ap.add_argument("--locomo", type=int, default=-1, help="questions per conversation")
    ap.add_argument("--rerank-pool", type=int, default=max(SEARCH_KS), help="judged candidates")
    ap.add_argument("--rerank-dir", type=Path, help="an ONNX cross-encoder to judge blocks with")
    ap.add_argument("--locomo-convs", default="", help="LoCoMo conversations (default: all)")
    args = ap.parse_args()
    args.sources = sources = [s for s in args.sources.split(",") if s]
    if args.data == "team":
        data = json.loads(DATA.read_text()) | {"source": str(DATA)}
    else:
        data = implicit_needs.load()
    encoder = load_encoder(SLUG, threads=1)
    results = []
    with scratch_database(encoder, "memserve-levers-") as (dsn, _):
        halves = HALVES if args.half == "both" else (args.half,)
        print(f"{'try / source / half':44} " + " ".join(f"{c[:8]:>8}" for c in COLUMNS))
        for n, spec in enumerate(args.tries):
            fields = json.loads(spec)
            r = asyncio.run(one_try(n, fields, dsn, encoder, data, args))
            results.append(r)
            for source in [k for k in r if k.split("+")[0] in sources]:
                for half in halves:
                    print(row(f"{spec[:24]} {source} {half}", r[source][half]), flush=True)
            if "locomo" in r:
                print(f"  LoCoMo {json.dumps(r['locomo'])}", flush=True)
    print(f"wrote {write_json('context_levers', {'tries': results, 'data': data['source']})}")


if __name__ == "__main__":
    main()
