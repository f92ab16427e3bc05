"""The GPU check of issue 34: torch CUDA fp16/fp32 vs ONNX CPU int8 on one machine.

Runs on a bare GPU machine with only this repository and the carried ``.gpu/`` folder
(``make gpu-prepare``; see loadtests/gpu_bundle.py), needing only numpy, torch,
transformers, tokenizers and onnxruntime (CPU build): no Ray, no database, no network.

1. Embedding throughput (texts/s) and p50/p95 latency per call at batch 1, 8, 32, 128,
   512, for short (~10 tokens) and long (~200 tokens) texts: torch CUDA fp16, torch
   CUDA fp32, and ONNX Runtime CPU int8 on all the machine's cores (the service's
   encoder: its verified int8 copy, sub-batches side by side, one per core).
2. Agreement of the GPU vectors with the CPU int8 ones on the BEIR sets (every document
   and query): mean/min cosine, top-10 overlap of exact (numpy) search, and each
   encoder's recall@10 / nDCG@10 against the qrels, so mixing node types is safe.

Every step is timed and bounded (``--budget-s``, per-cell caps): cells past the budget
are recorded as skipped, never run. Without a GPU it says so and exits 3, unless
``--dry-run`` (CPU: torch CPU fp32 stands in for CUDA, labelled as such, small caps).
Writes one JSON (``--out``; default ``$OUT/gpu_check.json``, else loadtests/results/)
and prints a table.

    bash loadtests/gpu_check.sh              # on the GPU machine, carry [".gpu"]
    bash loadtests/gpu_check.sh --dry-run    # here: the CPU parts, quickly
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "loadtests"))

from gpu_bundle import (  # noqa: E402
    ARCHIVE,
    BUNDLE,
    IR_SETS,
    onnx_files,
    read_jsonl,
    read_qrels,
    unpack,
    verify,
)

from loadtests.stats import percentile  # noqa: E402

BATCHES = (1, 8, 32, 128, 512)
LONG_WORDS = 150  # ~200 WordPiece tokens of BEIR prose
SHORT_WORDS = 7  # ~10 tokens with [CLS]/[SEP]


class Budget:
    """Seconds left of the whole run; a cell that would start past it is skipped."""

    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def texts_of(corpus: list[dict], words: int, count: int) -> list[str]:
    """``count`` distinct texts of about ``words`` words, cut from the BEIR documents."""
    stream = " ".join(d["text"] for d in corpus).split()
    return [" ".join(stream[(i * words) % (len(stream) - words) :][:words]) for i in range(count)]


def bench_cell(
    encode, texts: list[str], batch: int, cap_s: float, max_calls: int, warmup: int = 2
) -> dict:
    """Calls of ``batch`` distinct texts until ``cap_s`` or ``max_calls`` (at least 3)."""
    warmup = max(min(warmup, 2048 // batch), 1)  # about 2k texts of warm-up at most
    for n in range(warmup):  # allocator, kernels for these shapes (distinct texts: lengths)
        encode([texts[(n * batch + j) % len(texts)] for j in range(batch)])
    times: list[float] = []
    started = time.perf_counter()
    call = 0
    while call < 3 or (call < max_calls and time.perf_counter() - started < cap_s):
        chunk = [texts[(call * batch + j) % len(texts)] for j in range(batch)]
        t0 = time.perf_counter()
        encode(chunk)
        times.append(time.perf_counter() - t0)
        call += 1
    ms = [1000 * t for t in times]
    return {
        "batch": batch,
        "calls": call,
        "texts_per_s": round(batch * call / float(np.sum(times)), 1),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
    }


def run_bench(
    encoders: dict, inputs: dict, budget: Budget, cap_s: float, calls: int, batches=BATCHES
) -> list:
    rows = []
    warmup = 10 if calls > 3 else 1
    for label, encoder in encoders.items():
        for length, texts in inputs.items():
            tokens = float(np.mean(encoder.token_counts(texts[:256])))
            for batch in batches:
                row = {"encoder": label, "length": length, "tokens_mean": round(tokens, 1)}
                if budget.left() < cap_s:
                    rows.append({**row, "batch": batch, "skipped": "budget"})
                    continue
                cell = bench_cell(encoder.encode, texts, batch, cap_s, calls, warmup)
                rows.append({**row, **cell})
                print_row(rows[-1])
    return rows


def search(queries: np.ndarray, docs: np.ndarray, k: int = 10) -> np.ndarray:
    scores = queries @ docs.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def ranking(top: np.ndarray, ids: list[str], qids: list[str], qrels: dict) -> dict:
    recall, ndcg = [], []
    for row, qid in zip(top, qids, strict=True):
        rel = qrels.get(qid, {})
        if not rel:
            continue
        got = [ids[i] for i in row]
        recall.append(sum(1 for d in got if d in rel) / len(rel))
        dcg = sum(rel.get(d, 0) / np.log2(i + 2) for i, d in enumerate(got))
        ideal = sum(
            g / np.log2(i + 2) for i, g in enumerate(sorted(rel.values(), reverse=True)[:10])
        )
        ndcg.append(dcg / ideal if ideal else 0.0)
    return {
        "recall@10": round(float(np.mean(recall)), 4),
        "ndcg@10": round(float(np.mean(ndcg)), 4),
    }


def run_agreement(encoders: dict, reference: str, bundle: Path, max_docs: int) -> dict:
    """Per BEIR set: cosines of each encoder's vectors with ``reference``'s, top-10 overlap
    of exact search, and each encoder's recall@10/nDCG@10 on the qrels."""
    out = {}
    for name in IR_SETS:
        corpus = read_jsonl(bundle / "ir" / name / "corpus.jsonl")[:max_docs]
        queries = read_jsonl(bundle / "ir" / name / "queries.jsonl")
        qrels = read_qrels(bundle / "ir" / name / "qrels" / "test.tsv")
        docs = [(d.get("title", "") + " " + d["text"]).strip() for d in corpus]
        ids = [d["_id"] for d in corpus]
        qtexts, qids = [q["text"] for q in queries], [q["_id"] for q in queries]
        vectors, result = {}, {"docs": len(docs), "queries": len(qtexts), "encoders": {}}
        for label, encoder in encoders.items():
            t0 = time.perf_counter()
            vectors[label] = (encoder.encode(docs), encoder.encode(qtexts, is_query=True))
            embed_s = time.perf_counter() - t0
            result["encoders"][label] = {
                "embed_s": round(embed_s, 2),
                **ranking(search(vectors[label][1], vectors[label][0]), ids, qids, qrels),
            }
        ref_docs, ref_queries = vectors[reference]
        ref_top = search(ref_queries, ref_docs)
        for label, (d, q) in vectors.items():
            if label == reference:
                continue
            cos = np.concatenate([np.sum(d * ref_docs, axis=1), np.sum(q * ref_queries, axis=1)])
            top = search(q, d)
            overlap = [len(set(a) & set(b)) / 10 for a, b in zip(top, ref_top, strict=True)]
            result["encoders"][label] |= {
                f"mean_cosine_vs_{reference}": round(float(cos.mean()), 5),
                f"min_cosine_vs_{reference}": round(float(cos.min()), 5),
                f"top10_overlap_vs_{reference}": round(float(np.mean(overlap)), 4),
            }
        out[name] = result
    return out


def print_row(row: dict) -> None:
    print(
        f"  {row['encoder']:22} {row['length']:5} ({row['tokens_mean']:5.1f} tok) "
        f"batch {row['batch']:4}: {row['texts_per_s']:9.1f} texts/s  "
        f"p50 {row['p50_ms']:8.2f} ms  p95 {row['p95_ms']:8.2f} ms  ({row['calls']} calls)",
        flush=True,
    )


def environment(gpu: str | None) -> dict:
    import onnxruntime
    import torch
    import transformers

    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "host": platform.node(),
    }


def load_encoders(bundle: Path, on_gpu: bool, threads: int | None) -> tuple[dict, dict]:
    """The encoders under test (label -> encoder) and their load times."""
    from models.resolve import spec_with_files
    from models.session import open_encoder
    from models.spec import ALL_MINILM_L6_V2_INT8 as SPEC
    from models.torch_backend import open_torch_encoder

    graph, tokenizer = onnx_files(bundle)
    weights = bundle / "torch-fp16"
    loads: dict[str, float] = {}
    encoders: dict = {}

    def timed(label: str, build) -> None:
        """Load one encoder; a failure is recorded and the others still run (one-shot runs)."""
        t0 = time.perf_counter()
        try:
            encoder = build()
            encoder.warmup()
        except Exception as exc:
            traceback.print_exc()
            loads[label] = f"failed: {type(exc).__name__}: {exc}"
            print(f"LOAD FAILED {label}: {exc}", flush=True)
            return
        encoders[label] = encoder
        loads[label] = round(time.perf_counter() - t0, 2)
        print(f"loaded {label} in {loads[label]} s", flush=True)

    if on_gpu:
        timed("torch_cuda_fp16", lambda: open_torch_encoder(SPEC, "cuda", weights_dir=weights))
        timed(
            "torch_cuda_fp32",
            lambda: open_torch_encoder(SPEC, "cuda", weights_dir=weights, precision="fp32"),
        )
    else:  # dry run: the same code path on the CPU, labelled so it is not taken for a GPU
        timed(
            "torch_cpu_fp32_dryrun",
            lambda: open_torch_encoder(SPEC, "cpu", 1, weights_dir=weights),
        )
    cpu_spec = spec_with_files(SPEC, graph, tokenizer)
    timed("onnx_cpu_int8", lambda: open_encoder(cpu_spec, "cpu", threads, models_dir=bundle))
    return encoders, loads


def detect_gpu() -> tuple[str | None, str]:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), "ok"
    return None, (
        f"NO GPU: torch.cuda.is_available() is False (torch {torch.__version__}, "
        f"CUDA build {torch.version.cuda}, CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}); GPU figures are NOT measured"
    )


def default_out() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")  # noqa: UP017 (Python < 3.11)
    return REPO / "loadtests" / "results" / f"gpu_check-{stamp}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, default=BUNDLE)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: CPU parts, small caps")
    parser.add_argument("--budget-s", type=float, default=None, help="default 300")
    parser.add_argument("--cell-s", type=float, default=None, help="seconds per bench cell")
    parser.add_argument("--max-docs", type=int, default=None, help="BEIR docs per set")
    parser.add_argument("--threads", type=int, default=None, help="ONNX CPU threads (all)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    budget = Budget(args.budget_s or 300)
    steps: dict[str, float] = {}
    gpu, status = detect_gpu()  # first: a machine without one fails in seconds
    print(f"GPU: {gpu}" if gpu else status, flush=True)
    if gpu is None and not args.dry_run:
        return 3
    t0 = time.perf_counter()
    if (args.bundle / ARCHIVE).is_file():
        scratch = tempfile.TemporaryDirectory(prefix="gpu-check-")
        args.bundle = unpack(args.bundle, Path(scratch.name))
    manifest = verify(args.bundle)
    steps["unpack"] = time.perf_counter() - t0
    record: dict = {
        "issue": 34,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
        "status": "ok" if gpu else "no_gpu_dry_run",
        "note": None if gpu else status,
        "bundle_commit": manifest.get("commit"),
        "environment": environment(gpu),
    }
    t0 = time.perf_counter()
    encoders, record["load_s"] = load_encoders(args.bundle, gpu is not None, args.threads)
    steps["load"] = time.perf_counter() - t0

    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after each step: a run cut short still leaves its figures
        record["steps_s"] = {k: round(v, 1) for k, v in steps.items()}
        record["total_s"] = round(time.perf_counter() - started, 1)
        out.write_text(json.dumps(record, indent=2) + "\n")

    # Agreement first (bounded by the BEIR sets' size), then the benchmark cells in
    # whatever budget is left.
    t0 = time.perf_counter()
    max_docs = args.max_docs or (100_000 if gpu else 100)
    record["agreement"] = guarded(
        lambda: run_agreement(encoders, "onnx_cpu_int8", args.bundle, max_docs)
    )
    steps["agreement"] = time.perf_counter() - t0
    save()

    corpus = read_jsonl(args.bundle / "ir" / IR_SETS[0] / "corpus.jsonl")
    pool = 512 * (4 if gpu else 1)
    inputs = {
        "short": texts_of(corpus, SHORT_WORDS, pool),
        "long": texts_of(corpus, LONG_WORDS, pool),
    }
    cell_s = args.cell_s or (2.0 if gpu else 0.2)
    t0 = time.perf_counter()
    batches = BATCHES if gpu else BATCHES[:2]
    record["bench"] = guarded(
        lambda: run_bench(encoders, inputs, budget, cell_s, 200 if gpu else 3, batches)
    )
    steps["bench"] = time.perf_counter() - t0
    if gpu:
        import torch

        record["cuda_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    save()
    print_summary(record)
    print(f"wrote {out} ({record['total_s']} s)")
    return 0


def guarded(step):
    """A step's result, or its error as the result: the JSON still gets written."""
    try:
        return step()
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def print_summary(record: dict) -> None:
    print(f"\n== {record['status']}  {record['environment']['gpu'] or 'no GPU'} ==")
    for step in ("agreement", "bench"):
        if isinstance(record.get(step), dict) and "error" in record[step]:
            print(f"{step} FAILED: {record[step]['error']}")
    failed = {k: v for k, v in record.get("load_s", {}).items() if isinstance(v, str)}
    for label, why in failed.items():
        print(f"{label} not measured: {why}")
    for name, result in (record.get("agreement") or {}).items():
        if not isinstance(result, dict) or "encoders" not in result:
            continue
        print(f"{name}: {result['docs']} docs, {result['queries']} queries")
        for label, row in result["encoders"].items():
            extra = "  ".join(f"{k.split('_vs_')[0]} {v}" for k, v in row.items() if "_vs_" in k)
            print(
                f"  {label:22} recall@10 {row['recall@10']:.4f}  nDCG@10 {row['ndcg@10']:.4f}"
                f"  embed {row['embed_s']:6.2f} s  {extra}"
            )
    print("encoder                 length batch   texts/s    p50 ms    p95 ms")
    for row in record["bench"] if isinstance(record.get("bench"), list) else []:
        if "skipped" in row:
            print(
                f"{row['encoder']:23} {row['length']:6} {row['batch']:5}   skipped "
                f"({row['skipped']})"
            )
            continue
        print(
            f"{row['encoder']:23} {row['length']:6} {row['batch']:5} {row['texts_per_s']:9.1f} "
            f"{row['p50_ms']:9.2f} {row['p95_ms']:9.2f}"
        )
    print(f"steps: {record['steps_s']}")


if __name__ == "__main__":
    sys.exit(main())
