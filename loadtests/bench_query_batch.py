"""What coalescing the Retriever's query encodes buys (issue 23), without Serve's noise.

The Retriever embeds each search's query itself (``MEMSERVE_QUERY_EMBED=retriever``);
its :class:`~serve_app.retrieval.query_embed.QueryEmbedder` runs the queries that queue
while an encoder run computes together in the next run, up to ``MEMSERVE_QUERY_BATCH_MAX``.
This drives one QueryEmbedder in this process, as a Retriever replica holds it (the
default model, one ONNX thread as a 0.5-CPU replica gets), with ``--clients`` concurrent
callers, each embedding one synthetic question at a time, for ``max_batch`` 16 (default)
and 1 (one run per query), alternating ``--repeat`` times. It reports this process's CPU
per query (user + system, from ``os.times``), wall time per query, the mean texts per
run, and the ratios (medians over repeats). A whole-service A/B
(``bench_vs_mem0 --variant nocoalesce:MEMSERVE_QUERY_BATCH_MAX=1``) carries the same
effect under a +-25% run-to-run spread on a shared 2-core box; here the spread is a few %.

    python -m loadtests.bench_query_batch --clients 8 --queries 400 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time

from deployments.encoders import replica_encoders
from loadtests.harness import write_json
from loadtests.synthetic import question
from serve_app.retrieval.query_embed import QueryEmbedder
from serve_app.settings import Settings


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


async def drive(embedder: QueryEmbedder, texts: list[str], clients: int) -> dict:
    """Every text embedded once by ``clients`` concurrent callers; cost per query."""
    pending = iter(texts)

    async def caller() -> None:
        for text in pending:
            await embedder.embed([text])

    runs0, c0, w0 = embedder.runs, cpu_s(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(clients)))
    n, runs = len(texts), embedder.runs - runs0
    return {
        "cpu_ms_per_query": (cpu_s() - c0) / n * 1e3,
        "wall_ms_per_query": (time.perf_counter() - w0) / n * 1e3,
        "texts_per_run": n / max(runs, 1),
    }


async def main_async(args: argparse.Namespace) -> dict:
    settings = Settings().with_(embed={"threads": args.threads})
    encoders = replica_encoders(settings, [])
    rng = random.Random(3)
    texts = [question(rng) for _ in range(args.queries)]
    sides = {"batch16": 16, "batch1": 1}
    embedders = {name: QueryEmbedder(encoders, size) for name, size in sides.items()}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    await drive(embedders["batch16"], texts[:50], args.clients)  # warm both paths
    await drive(embedders["batch1"], texts[:50], args.clients)
    for r in range(args.repeat):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            res = await drive(embedders[name], texts, args.clients)
            runs[name].append(res)
            print(f"repeat {r + 1} {name:8}: " + "  ".join(f"{k} {v:.3f}" for k, v in res.items()))
    for e in embedders.values():
        e.close()
    med = {
        name: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for name, rs in runs.items()
    }
    ratio = {
        k: med["batch16"][k] / med["batch1"][k] for k in ("cpu_ms_per_query", "wall_ms_per_query")
    }
    return {"params": vars(args), "medians": med, "ratio_batch16_over_batch1": ratio, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)  # a 0.5-CPU Retriever replica's
    args = ap.parse_args()
    out = asyncio.run(main_async(args))
    for name, m in out["medians"].items():
        print(f"median {name:8}: " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()))
    print(
        "batch16 / batch1:", {k: round(v, 3) for k, v in out["ratio_batch16_over_batch1"].items()}
    )
    print(f"wrote {write_json(f'bench_query_batch-c{args.clients}', payload=out)}")


if __name__ == "__main__":
    main()
