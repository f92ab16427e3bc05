"""``load_encoder``: a spec name, model directory or spec to a ready, verified encoder.

Above :mod:`models.requantize` (a spec asking for it runs its verified int8 copy on
CPU) and :mod:`models.session` (the ONNX Runtime session); nothing below imports this
module, which keeps ``models/`` free of import cycles (tests/models/test_imports.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from models.encoder import CPU_EP, Encoder
from models.requantize import prepare_model
from models.resolve import get_spec
from models.session import open_encoder, providers_for
from models.spec import ModelSpec


def load_encoder(
    name_or_dir: str | os.PathLike[str] | ModelSpec,
    device: str = "auto",
    threads: int | None = None,
    *,
    models_dir: Path | None = None,
    max_batch_tokens: int | None = None,
    max_batch_size: int = 64,
    spinning: bool | None = None,
    parallel_runs: bool = True,
    backend: str = "onnx",
    torch_weights: Path | None = None,
) -> Encoder:
    """Build an :class:`Encoder` from a spec name, a model directory or a spec.

    Files are resolved and sha256-checked (see :mod:`models.resolve`); nothing
    is downloaded. On CPU a spec with ``requantize`` runs its verified int8 copy
    from the models cache, built on first use (:func:`models.requantize.prepare_model`).
    ``threads`` defaults to the CPUs this process may use.
    ``max_batch_tokens`` (padded tokens per run) defaults to
    :data:`~models.encoder.CPU_BATCH_TOKENS` on CPU and
    :data:`~models.encoder.GPU_BATCH_TOKENS` on CUDA.
    ``spinning=False`` stops idle ONNX Runtime threads from busy-waiting, which
    leaves the CPU to the replica's event loop and to other processes.
    On CPU the ``threads`` run sub-batches side by side on a single-threaded
    session (see :class:`Encoder`); ``parallel_runs=False`` gives them to ONNX
    Runtime's intra-op pool instead (one run at a time, as on CUDA).
    ``backend="torch"`` runs the same spec on PyTorch from the weights directory
    ``torch_weights`` (default: in the models cache), see :mod:`models.torch_backend`.
    """
    spec = (
        name_or_dir
        if isinstance(name_or_dir, ModelSpec)
        else get_spec(name_or_dir, models_dir=models_dir)
    )
    if backend == "torch":
        from models.torch_backend import open_torch_encoder

        return open_torch_encoder(
            spec,
            device,
            threads,
            weights_dir=torch_weights,
            models_dir=models_dir,
            max_batch_tokens=max_batch_tokens,
        )
    if backend != "onnx":
        raise ValueError(f"embed backend must be onnx or torch, not {backend!r}")
    providers = providers_for(device)
    if spec.requantize is not None and providers[0] == CPU_EP:
        spec = prepare_model(spec, models_dir=models_dir)
    return open_encoder(
        spec,
        device,
        threads,
        providers=providers,
        models_dir=models_dir,
        max_batch_tokens=max_batch_tokens,
        max_batch_size=max_batch_size,
        spinning=spinning,
        parallel_runs=parallel_runs,
    )
