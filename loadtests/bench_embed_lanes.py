"""A memory write's embedding while document chunks embed: the Embedder's bulk lane.

    python -m loadtests.bench_embed_lanes                      # 3 calls of 64 chunks
    python -m loadtests.bench_embed_lanes --chunks 64 --calls 3 --slice-tokens 256,512

In process, no Ray cluster and no service: the real ``deployments.embedder.Embedder``
class (its gate, its ``@serve.batch`` queue, its thread) over the configured encoder, so
it isolates the Embedder's scheduling from HTTP, the database and Serve's routing
(``loadtests/bench_documents.py`` measures the whole service). A writer embeds one short
text every ``1 / --rate`` s (as ``POST /v1/memories`` with infer off does) while a
producer embeds ``--calls`` lists of ``--chunks`` 256-token chunks back to back, once with
``bulk=False`` (the old path: each list one encoder run of its own) and once per
``--slice-tokens`` value with ``bulk=True`` (the lane), with idle phases before and after.
Reported: the writes' p50 / p95 / max per phase, and chunks/s. Prints a table and writes
loadtests/results/bench_embed_lanes-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtests.stats import percentile

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = " ".join(f"word{i} policy refund shipping" for i in range(60))  # 256 tokens (MiniLM)


def embedder() -> Any:
    """The Embedder class outside Ray (as its unit tests build it)."""
    from ray.serve import batching

    # Outside a replica there is no max_ongoing_requests to compare max_batch_size with.
    batching._BatchQueue._warn_if_max_batch_size_exceeds_max_ongoing_requests = lambda self: None
    from deployments.embedder import Embedder

    return Embedder.func_or_class()


def summary(latencies_ms: list[float]) -> dict[str, float]:
    """p50 / p95 / max of the writes (loadtests.stats; nan without writes), and how many."""
    return {
        "writes": len(latencies_ms),
        "p50_ms": percentile(latencies_ms, 50),
        "p95_ms": percentile(latencies_ms, 95),
        "max_ms": percentile(latencies_ms, 100),
    }


async def phase(e: Any, args: argparse.Namespace, bulk: bool | None) -> dict[str, Any]:
    """Writes at ``--rate`` while the producer runs (``bulk`` None: idle for the baseline)."""
    latencies: list[float] = []
    stop = asyncio.Event()

    async def writes() -> None:
        i = 0
        while not stop.is_set():
            t = time.perf_counter()
            await e.embed(f"I prefer email to phone calls {i}")
            latencies.append((time.perf_counter() - t) * 1000)
            i += 1
            await asyncio.sleep(1 / args.rate)

    writer = asyncio.ensure_future(writes())
    started, chunks = time.perf_counter(), 0
    try:
        if bulk is None:
            await asyncio.sleep(args.baseline_s)
        else:
            for call in range(args.calls):
                texts = [f"{CHUNK} {call}-{k}" for k in range(args.chunks)]
                await e.embed_many(texts, False, None, bulk)
                chunks += len(texts)
    finally:
        stop.set()
        await writer
    elapsed = time.perf_counter() - started
    return {**summary(latencies), "chunks_per_s": chunks / elapsed, "seconds": elapsed}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    e = embedder()
    runs: dict[str, Any] = {"idle before": await phase(e, args, None)}
    runs["own run (bulk=False)"] = await phase(e, args, False)
    for tokens in [int(t) for t in args.slice_tokens.split(",") if t.strip()] or [None]:
        e.reconfigure({"bulk_slice_tokens": tokens})
        before = e.lanes.slices_run
        out = await phase(e, args, True)
        out["slices"] = e.lanes.slices_run - before
        runs[f"lane, slice tokens {tokens or e.encoder.max_batch_tokens}"] = out
    runs["idle after"] = await phase(e, args, None)
    e._pool.shutdown(wait=True)
    await e._flusher.stop()
    return {
        "model": e.encoder.spec.name,
        "chunks": args.chunks,
        "calls": args.calls,
        "rate_per_s": args.rate,
        "phases": runs,
    }


def report(out: dict[str, Any]) -> None:
    print(
        f"\n{out['model']}: {out['calls']} x {out['chunks']} chunks of 256 tokens,"
        f" writes at {out['rate_per_s']}/s"
    )
    print(
        f"  {'phase':<28} {'writes':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'chunks/s':>9}"
    )
    for name, p in out["phases"].items():
        print(
            f"  {name:<28} {p['writes']:>6} {p['p50_ms']:>8.0f} {p['p95_ms']:>8.0f}"
            f" {p['max_ms']:>8.0f} {p['chunks_per_s']:>9.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=64, help="chunks per embed_many call")
    ap.add_argument("--calls", type=int, default=3, help="calls per producer phase")
    ap.add_argument("--rate", type=float, default=4.0, help="writes per second")
    ap.add_argument("--baseline-s", type=float, default=3.0)
    ap.add_argument("--slice-tokens", default="", help="MEMSERVE_EMBED_BULK_SLICE_TOKENS values")
    args = ap.parse_args()
    out = asyncio.run(bench(args))
    report(out)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench_embed_lanes-{datetime.now():%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
