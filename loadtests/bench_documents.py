"""What a 300-page PDF's ingest costs another tenant's writes, through the real service.

    python -m loadtests.bench_documents                    # starts its own service
    python -m loadtests.bench_documents --pages 300 --rate 4 --baseline-s 30
    python -m loadtests.bench_documents --embed-batch 64,16  # one fresh service per value
    python -m loadtests.bench_documents --slice-tokens 512,2048  # the Embedder's bulk lane

One run, one fresh service (Ray Serve over HTTP, `python -m serve_app run`): tenant
``writers`` adds memories (``POST /v1/memories``, infer off: one embedding and one insert
each) at a steady open-loop rate (a write is sent on schedule whether or not the earlier
ones have answered, so a slow service shows as latency, not as fewer writes). First
``--baseline-s`` seconds without anything else; then tenant ``docs`` posts a generated
``--pages``-page PDF (``text_pdf``-style pages of ``--words`` words each, several chunks
per page), which is answered 202 as a job, and the writes go on until the job is done;
then ``--baseline-s`` seconds again without it (drift check). Reported: the writes' p50
and p95 latency before, during and after the ingest and the ratios during/before; the
PDF's accept latency (the 202: parse + chunk + the durable store), its time to done and
chunks/s (202 to done), and any failed writes. ``--embed-batch`` runs the whole
measurement once per ``MEMSERVE_DOC_EMBED_BATCH`` value (chunks per Embedder call) and
``--slice-tokens`` once per ``MEMSERVE_EMBED_BULK_SLICE_TOKENS`` value (the Embedder's
bulk-lane slice: the longest run another tenant's write can queue behind, models/lanes.py;
empty: the setting's default), each pair on its own fresh service.
Prints a table and writes loadtests/results/bench_documents-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import secrets
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from loadtests.harness import fresh_service
from loadtests.stats import percentile
from loadtests.synthetic import memory
from serve_app.testing.pdfs import text_pdf

RESULTS = Path(__file__).with_name("results")
WORDS = [
    *("depot", "shipment", "invoice", "refund", "policy", "warehouse", "carrier", "customs"),
    *("pallet", "route", "driver", "schedule", "delivery", "contract", "supplier", "audit"),
    *("freight", "manifest", "label", "return", "window", "holiday", "overtime", "safety"),
    *("inspection", "forklift", "dock", "quota", "region", "manager"),
]


def make_pdf(pages: int, words: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    text = [
        f"Page {n + 1}. " + " ".join(rng.choice(WORDS) for _ in range(words)) for n in range(pages)
    ]
    return text_pdf(text)


class Writer:
    """Adds memories at ``rate``/s for one tenant's users until stopped; each write's
    (start time, latency ms, ok)."""

    def __init__(self, client: httpx.AsyncClient, rate: float, users: int) -> None:
        self.client, self.rate, self.users = client, rate, users
        self.samples: list[tuple[float, float, bool]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._rng = random.Random(1)

    async def _one(self, n: int) -> None:
        body = {"user_id": f"w{n % self.users}", "content": memory(self._rng)}
        t = time.perf_counter()
        try:
            r = await self.client.post("/v1/memories", json=body)
            ok = r.status_code == 201
        except httpx.HTTPError:
            ok = False
        self.samples.append((t, (time.perf_counter() - t) * 1000, ok))

    async def run(self, stop: asyncio.Event) -> None:
        start, n = time.perf_counter(), 0
        while not stop.is_set():
            task = asyncio.create_task(self._one(n))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            n += 1
            await asyncio.sleep(max(0.0, start + n / self.rate - time.perf_counter()))
        await asyncio.gather(*list(self._tasks))

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        got = [(ms, ok) for t, ms, ok in self.samples if t0 <= t < t1]
        lat = [ms for ms, ok in got if ok]
        return {
            "writes": len(got),
            "failed": sum(1 for _, ok in got if not ok),
            "p50_ms": percentile(lat, 50),
            "p95_ms": percentile(lat, 95),
            "mean_ms": statistics.fmean(lat) if lat else float("nan"),
        }


async def bench(
    base_url: str,
    writer_key: str,
    docs_key: str,
    args: argparse.Namespace,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict:
    """One measurement against the service at ``base_url`` (``transport``: an in-process
    app instead, for a dry run of this script)."""
    pdf = make_pdf(args.pages, args.words)
    limits = httpx.Limits(max_connections=64)
    async with (
        httpx.AsyncClient(
            base_url=base_url,
            timeout=120,
            limits=limits,
            transport=transport,
            headers={"Authorization": f"Bearer {writer_key}"},
        ) as wc,
        httpx.AsyncClient(
            base_url=base_url,
            timeout=600,
            transport=transport,
            headers={"Authorization": f"Bearer {docs_key}"},
        ) as dc,
    ):
        for u in range(args.users):  # warm: first writes of a user create its counters
            (
                await wc.post("/v1/memories", json={"user_id": f"w{u}", "content": "warm"})
            ).raise_for_status()
        writer, stop = Writer(wc, args.rate, args.users), asyncio.Event()
        running = asyncio.create_task(writer.run(stop))
        t_base = time.perf_counter()
        await asyncio.sleep(args.baseline_s)

        t_post = time.perf_counter()
        files = {"file": ("manual.pdf", pdf, "application/pdf")}
        form = {"document_id": "bench-manual", "title": "Operations manual"}
        prefer = {"Prefer": "respond-async"}  # a job at any size (300 pages are one anyway)
        r = await dc.post("/v1/documents", files=files, data=form, headers=prefer)
        t_accept = time.perf_counter()
        if r.status_code != 202:
            stop.set()
            await running
            raise SystemExit(f"expected 202, got {r.status_code}: {r.text[:500]}")
        job = r.json()
        location = r.headers["location"]
        while job["status"] not in ("done", "failed"):
            await asyncio.sleep(0.2)
            job = (await dc.get(location)).json()
        t_done = time.perf_counter()
        await asyncio.sleep(args.baseline_s)
        t_end = time.perf_counter()
        stop.set()
        await running

    before = writer.window(t_base, t_post)
    during = writer.window(t_post, t_done)
    after = writer.window(t_done, t_end)
    ingest_s = t_done - t_accept
    return {
        "pages": args.pages,
        "words_per_page": args.words,
        "pdf_bytes": len(pdf),
        "rate_per_s": args.rate,
        "writer_users": args.users,
        "job": {k: job.get(k) for k in ("status", "chunk_count", "version", "attempts", "error")},
        "accept_ms": (t_accept - t_post) * 1000,
        "time_to_done_s": t_done - t_post,
        "ingest_s": ingest_s,
        "chunks_per_s": (job.get("chunk_count") or 0) / ingest_s,
        "writes": {"before": before, "during": during, "after": after},
        "ratio_during_before": {
            "p50": during["p50_ms"] / before["p50_ms"],
            "p95": during["p95_ms"] / before["p95_ms"],
        },
    }


def report(out: dict) -> None:
    w = out["writes"]
    print(
        f"\nMEMSERVE_DOC_EMBED_BATCH={out.get('embed_batch')}"
        f" MEMSERVE_EMBED_BULK_SLICE_TOKENS={out.get('slice_tokens') or 'default'}:"
        f" {out['pages']}-page PDF"
        f" ({out['pdf_bytes'] / 1024:.0f} KiB, {out['job']['chunk_count']} chunks):"
        f" job {out['job']['status']}"
    )
    print(
        f"  accept (202) {out['accept_ms']:.0f} ms; done after {out['time_to_done_s']:.1f} s;"
        f" {out['chunks_per_s']:.1f} chunks/s"
    )
    print(f"  other tenant's writes at {out['rate_per_s']}/s:")
    print("  phase    writes  failed   p50 ms   p95 ms")
    for phase in ("before", "during", "after"):
        p = w[phase]
        cols = f"{p['writes']:>7} {p['failed']:>7} {p['p50_ms']:>8.1f} {p['p95_ms']:>8.1f}"
        print(f"  {phase:<7} {cols}")
    r = out["ratio_during_before"]
    print(f"  during/before: p50 x{r['p50']:.2f}, p95 x{r['p95']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--words", type=int, default=300, help="words per page")
    ap.add_argument("--rate", type=float, default=4.0, help="the other tenant's writes per s")
    ap.add_argument("--users", type=int, default=8, help="the other tenant's users")
    ap.add_argument("--baseline-s", type=float, default=30.0)
    ap.add_argument("--embed-batch", default="64", help="MEMSERVE_DOC_EMBED_BATCH values")
    ap.add_argument("--slice-tokens", default="", help="MEMSERVE_EMBED_BULK_SLICE_TOKENS values")
    ap.add_argument("--host", help="an already running service (then --writer-key, --docs-key)")
    ap.add_argument("--writer-key")
    ap.add_argument("--docs-key")
    args = ap.parse_args()
    runs = []
    if args.host:
        runs.append(asyncio.run(bench(args.host, args.writer_key, args.docs_key, args)))
    batches = [] if args.host else [int(b) for b in args.embed_batch.split(",")]
    slices = [int(t) for t in args.slice_tokens.split(",") if t.strip()] or [None]
    for batch, tokens in itertools.product(batches, slices):
        env = {"MEMSERVE_DOC_EMBED_BATCH": str(batch)}
        if tokens is not None:
            env["MEMSERVE_EMBED_BULK_SLICE_TOKENS"] = str(tokens)
        with fresh_service(**env) as svc:
            writer_key = svc.add_key("msk_" + secrets.token_hex(16), "writers", "service")
            docs_key = svc.add_key("msk_" + secrets.token_hex(16), "docs", "service")
            out = asyncio.run(bench(svc.base_url, writer_key, docs_key, args))
            runs.append({"embed_batch": batch, "slice_tokens": tokens, **out})
    for out in runs:
        report(out)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"bench_documents-{datetime.now():%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps({"runs": runs}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
