"""CPU per context block, in process (issue 29): where a /v1/context call spends its CPU.

bench_context.py measures the service (Ray, HTTP, one replica per role) on a shared
box where wall time is noise; this script runs the same builder through the
composition root in one process (real embedded PostgreSQL, the real int8 encoder and
retriever; no Ray, no HTTP: ``serve_app/testing/inprocess.py``), so CPU seconds per
call can be read exactly and profiled. Per variant (a preset of the ``MEMSERVE_CONTEXT_*``
levers, ``serve_app.settings.CONTEXT_PRESETS``, as in bench_context): the users of
``loadtests/data/context_bench.json`` added (typed or untyped), every message asked
``--repeat`` times after one warm-up pass, and

- ``cpu_ms_per_call``: this process's CPU (the app's and the encoder's work) plus
  PostgreSQL's backends (found by the data directory), per call;
- the encoder's part (:class:`loadtests.context_inprocess.EncodeMeter`): its thread CPU,
  texts, ONNX Runtime runs and padded tokens per call;
- ``quality``: the warm-up pass's blocks scored as bench_context scores them (needed
  recall, unneeded share of the retrieved section; calibration / held-out halves), so
  a cut in CPU is checked for quality without Ray;
- with ``--profile``, cProfile's top functions (timer: process CPU time, so awaits and
  other processes do not count) by own time and by cumulative time.

    nice -n 19 python -m loadtests.profile_context --variants baseline,all --repeat 3
    nice -n 19 python -m loadtests.profile_context --variants all --profile
    nice -n 19 python -m loadtests.profile_context --variants all,encoded --locomo-queries 60

(``encoded``: the defaults with the parts and time-free texts encoded on their own
instead of pooled from the message's run; docs/operations.md, "Context CPU").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests import procstat  # noqa: E402
from loadtests.bench_context import DATA, LOCOMO  # noqa: E402
from loadtests.context_inprocess import (  # noqa: E402
    EncodeMeter,
    block_outcome,
    load_labelled,
    locomo_recall,
    quality,
)
from loadtests.harness import scratch_database, write_json  # noqa: E402
from models import load_encoder  # noqa: E402
from serve_app.embedding_model import ModelFacts  # noqa: E402
from serve_app.settings import CONTEXT_PRESETS, Settings  # noqa: E402
from serve_app.testing.inprocess import in_process_services  # noqa: E402

SLUG = "all-minilm-l6-v2-int8"
TENANT = "t1"


def context_fields(variant: str) -> dict[str, Any]:
    """The variant (a preset of serve_app.settings) as ContextSettings fields."""
    return dict(CONTEXT_PRESETS[variant])


def pg_cpu(data_dir: str) -> float:
    snap = procstat.snapshot([], match=lambda cmd: data_dir in cmd)
    return sum(p.cpu_s for p in snap.values())


async def one_variant(
    variant: str, prefix: str, dsn: str, pg_dir: str, encoder, meter: EncodeMeter, args
) -> dict:
    """``prefix``: the users' prefix, one per run (a variant asked again writes its own)."""
    data = json.loads(DATA.read_text())
    settings = Settings().with_(context=context_fields(variant))
    model = ModelFacts.of(encoder.spec)
    async with in_process_services(settings, model, dsn, encoder) as services:
        typed = args.source == "typed"
        owners, labels = await load_labelled(services, data, prefix, typed, TENANT)
        asks = [(owners[m["user"]], m["text"]) for m in data["messages"]]
        outs = []  # warm-up: caches loaded, code paths run once; its blocks scored
        for i, ((owner, text), msg) in enumerate(zip(asks, data["messages"], strict=True)):
            block = await services.context.build(owner, text)
            outs.append((i, msg["user"], block_outcome(labels[msg["user"]], msg["needs"], block)))
        meter.reset()
        # CPU seconds, not wall time: the box is shared, and awaits are not work
        prof = cProfile.Profile(time.process_time) if args.profile else None
        cpu0, pg0, wall0 = time.process_time(), pg_cpu(pg_dir), time.perf_counter()
        if prof:
            prof.enable()
        for _ in range(args.repeat):
            for owner, text in asks:
                await services.context.build(owner, text)
        if prof:
            prof.disable()
        calls = args.repeat * len(asks)
        own = time.process_time() - cpu0
        pg = pg_cpu(pg_dir) - pg0
        out = {
            "calls": calls,
            "cpu_ms_per_call": round((own + pg) * 1000 / calls, 3),
            "process_cpu_ms_per_call": round(own * 1000 / calls, 3),
            "postgres_cpu_ms_per_call": round(pg * 1000 / calls, 3),
            "wall_ms_per_call": round((time.perf_counter() - wall0) * 1000 / calls, 3),
        } | meter.per_call(calls)
        out["quality"] = quality(outs, labels)
        if args.locomo_queries >= 0:  # after the timed passes: not in their CPU
            convs = json.loads(LOCOMO.read_text())
            out["locomo"] = await locomo_recall(
                services, convs, args.locomo_queries, TENANT, prefix
            )
        if prof:
            out["profile"] = {k: _top(prof, k, args.top) for k in ("tottime", "cumulative")}
        return out


def _top(prof: cProfile.Profile, key: str, n: int) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(n)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--variants", default="baseline,all")
    ap.add_argument("--source", choices=("typed", "untyped"), default="untyped")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile the timed passes")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--locomo-queries",
        type=int,
        default=-1,
        help="LoCoMo dev questions per conversation in the block (0: all; -1: skip)",
    )
    args = ap.parse_args()
    encoder = load_encoder(SLUG, threads=1)
    meter = EncodeMeter(encoder)
    # the metrics flusher's first flush imports ray.serve (~1 s of CPU, no Ray needed):
    # paid here, not by whichever variant's timed pass holds the first flush
    import ray.serve.metrics  # noqa: F401

    results: dict[str, dict] = {}
    with scratch_database(encoder, "memserve-ctxprof-") as (dsn, tmp):
        for n, v in enumerate(v for v in args.variants.split(",") if v):
            name = v if v not in results else f"{v}#{n}"  # a variant asked again
            run = one_variant(v, f"r{n}", dsn, tmp, encoder, meter, args)
            results[name] = r = asyncio.run(run)
            brief = {k: x for k, x in r.items() if k not in ("profile", "quality")}
            print(f"[{name}] {json.dumps(brief)}", flush=True)
            q = r["quality"]
            print(f"[{name}] quality {json.dumps({h: q[h] for h in ('held_out', 'all')})}")
            if "locomo" in r:
                print(f"[{name}] LoCoMo {json.dumps(r['locomo'])}", flush=True)
            for k, text in r.get("profile", {}).items():
                print(f"--- {name} by {k}\n{text}", flush=True)
    base = [r["cpu_ms_per_call"] for k, r in results.items() if k.split("#")[0] == "baseline"]
    if base:  # against the mean of the baseline runs
        for r in results.values():
            r["cpu_vs_baseline"] = round(r["cpu_ms_per_call"] * len(base) / sum(base), 3)
    payload = {"variants": results, "config": vars(args) | {"data": str(DATA)}}
    print(f"wrote {write_json('profile_context', payload)}")


if __name__ == "__main__":
    main()
