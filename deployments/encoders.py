"""How a replica loads its encoders: the Embedder and the Retriever both come through here.

Same settings (``MEMSERVE_EMBED_*``), same factory (:func:`models.shared.encoder_set`),
so a Retriever embedding queries itself runs exactly the Embedder's verified
model, and one process never holds two copies of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from models.device_check import require_device
from models.encoder import default_threads
from models.encoder_set import EncoderSet
from models.shared import EncoderOptions, encoder_set
from serve_app.settings import Settings


def replica_threads(configured: int | None = None) -> int:
    """ONNX Runtime threads for this replica: setting, else its Ray CPUs, else the OS's."""
    if configured:
        return int(configured)
    try:
        import ray

        if ray.is_initialized():
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
            if cpus:
                return max(1, math.floor(cpus + 1e-9))
    except Exception:  # not in a Ray worker
        pass
    return default_threads()


def encoder_options(settings: Settings, device: str | None = None) -> EncoderOptions:
    """This replica's encoder options from the settings (``device`` overrides the setting)."""
    return EncoderOptions(
        device=device or settings.embed.device,
        threads=replica_threads(settings.embed.threads),
        max_batch_tokens=settings.embed.max_batch_tokens,
        spinning=settings.embed.spinning,
        backend=settings.embed.backend,
        torch_weights=settings.embed.torch_weights,
    )


def replica_encoders(
    settings: Settings, refs: Sequence[str], device: str | None = None
) -> EncoderSet:
    """``refs[0]`` (default: ``MEMSERVE_EMBED_MODEL``) and the rest, loaded and warmed up."""
    named = [ref for ref in refs if ref] or [settings.embed.model]
    options = encoder_options(settings, device)
    # MEMSERVE_EMBED_DEVICE=cuda where CUDA cannot run fails here, before any load.
    require_device(options.device, options.backend)
    encoders = encoder_set(named, options)
    for encoder in encoders.loaded():
        encoder.warmup()
    return encoders
