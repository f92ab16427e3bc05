"""The one factory replicas load encoders through: one object per process and options.

The Embedder (batched writes, re-embedding, GPU) and the Retriever (query vectors, one
Serve hop per search) both call :func:`encoder_set`, so they run the same
verified model (spec, manifest and sha256 checks of :func:`models.loader.load_encoder`),
and code paths in one process share the loaded encoder instead of holding copies.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from models.encoder import Encoder
from models.encoder_set import EncoderSet
from models.loader import load_encoder
from models.spec import ModelSpec


@dataclass(frozen=True)
class EncoderOptions:
    """How a replica runs its encoders (``MEMSERVE_EMBED_*``; threads from its CPUs)."""

    device: str = "auto"
    threads: int | None = None
    max_batch_tokens: int | None = None
    spinning: bool | None = None
    backend: str = "onnx"  # or "torch" (models.torch_backend)
    torch_weights: Path | None = None


_lock = threading.Lock()  # one load at a time: a second caller waits and gets the same object
_loaded: dict[tuple[str | ModelSpec, EncoderOptions], Encoder] = {}


def shared_encoder(ref: str | ModelSpec, options: EncoderOptions) -> Encoder:
    """The encoder of ``ref`` (spec name, model directory or spec) under ``options``,
    loaded once."""
    key = (ref, options)
    with _lock:
        found = _loaded.get(key)
        if found is None:
            found = load_encoder(
                ref,
                device=options.device,
                threads=options.threads,
                max_batch_tokens=options.max_batch_tokens,
                spinning=options.spinning,
                backend=options.backend,
                torch_weights=options.torch_weights,
            )
            _loaded[key] = found
        return found


def encoder_set(refs: Sequence[str | ModelSpec], options: EncoderOptions) -> EncoderSet:
    """``refs[0]`` as the default, the others (a model change: the filling one) loaded now;
    a model named later loads through the same factory."""
    if not refs:
        raise ValueError("encoder_set needs at least one model reference")

    def load(ref: str | ModelSpec) -> Encoder:
        return shared_encoder(ref, options)

    first = refs[0]
    encoders = EncoderSet(load(first), load, first if isinstance(first, str) else None)
    for ref in refs[1:]:
        encoders.get(ref)
    return encoders
