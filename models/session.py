"""An :class:`~models.encoder.Encoder` over one spec's files exactly as they are.

The bottom of model loading: no re-quantisation here, so :mod:`models.agreement` (which
:mod:`models.requantize` uses to check a copy) can run any graph of a spec without
importing the loader that calls the re-quantiser (:mod:`models.loader`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from models.encoder import (
    CPU_BATCH_TOKENS,
    CPU_EP,
    CUDA_EP,
    GPU_BATCH_TOKENS,
    DeviceUnavailableError,
    Encoder,
    default_threads,
    gpu_visible,
    select_providers,
)
from models.resolve import resolve_onnx, resolve_tokenizer
from models.spec import ModelSpec

log = logging.getLogger(__name__)

Providers = list[str | tuple[str, dict[str, Any]]]


def providers_for(device: str) -> Providers:
    """ONNX Runtime providers of a device setting on this machine (see select_providers)."""
    import onnxruntime as ort

    return select_providers(device, ort.get_available_providers(), gpu_visible())


def open_encoder(
    spec: ModelSpec,
    device: str = "auto",
    threads: int | None = None,
    *,
    providers: Providers | None = None,
    models_dir: Path | None = None,
    max_batch_tokens: int | None = None,
    max_batch_size: int = 64,
    spinning: bool | None = None,
    parallel_runs: bool = True,
) -> Encoder:
    """The spec's graph (sha256-checked by :mod:`models.resolve`) in an ONNX Runtime session.

    The options are :func:`models.loader.load_encoder`'s; ``providers`` defaults to
    :func:`providers_for` ``device``.
    """
    import onnxruntime as ort
    from tokenizers import Tokenizer

    providers = providers if providers is not None else providers_for(device)
    on_gpu = providers[0] != CPU_EP
    onnx_path = resolve_onnx(spec, gpu=on_gpu, models_dir=models_dir)
    tokenizer_path = resolve_tokenizer(spec, models_dir=models_dir)

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()  # we pad per length-sorted sub-batch ourselves
    tokenizer.enable_truncation(max_length=spec.max_tokens)

    cpus = int(threads) if threads else default_threads()
    parallel = cpus if parallel_runs and not on_gpu else 1
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = 1 if parallel > 1 else cpus
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if spinning is not None:
        flag = "1" if spinning else "0"
        options.add_session_config_entry("session.intra_op.allow_spinning", flag)
    session = ort.InferenceSession(str(onnx_path), sess_options=options, providers=providers)
    used = session.get_providers()
    actual = "cuda" if CUDA_EP in used else "cpu"
    if device == "cuda" and actual != "cuda":
        raise DeviceUnavailableError(f"CUDA requested but ONNX Runtime runs on {used}")
    if on_gpu and actual != "cuda":
        log.warning("CUDA EP could not start for %s; running on CPU", spec.name)
    if actual == "cuda" and ("int8" in onnx_path.name or "quantized" in onnx_path.name):
        log.warning(
            "%s runs an int8 (CPU-oriented) graph on CUDA; export an fp16 graph for GPUs: "
            "python -m models export <checkpoint> --fp16",
            spec.name,
        )
    log.info(
        "encoder %s on %s (%s), %d threads, %d parallel runs",
        spec.name,
        actual,
        onnx_path,
        cpus,
        parallel,
    )
    return Encoder(
        spec,
        session,
        tokenizer,
        device=actual,
        max_batch_tokens=max_batch_tokens
        or (GPU_BATCH_TOKENS if actual == "cuda" else CPU_BATCH_TOKENS),
        max_batch_size=max_batch_size,
        onnx_path=onnx_path,
        parallel=parallel,
    )
