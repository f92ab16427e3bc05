"""Is this node's embedding device usable? Checked at start, before a replica serves.

Two ways a GPU node silently ends up on the CPU, both caught here:

- ``onnxruntime`` and ``onnxruntime-gpu`` are two distributions of one Python package
  (``onnxruntime``); installed side by side, whichever was installed last owns the
  files, so a later ``pip install`` of the base dependencies can put the CPU build
  back over the GPU one. :func:`onnxruntime_distributions` lists the distributions that
  provide the package (from the installed metadata), and a GPU install must have
  exactly one, with ``CUDAExecutionProvider`` (``make gpu-install`` does that).
- ``MEMSERVE_EMBED_DEVICE=cuda`` on a node where CUDA cannot run (no provider, no
  visible GPU, or torch without CUDA): :func:`require_device` fails at start with what
  to do, instead of the encoder falling back to the CPU. ``auto`` keeps its behaviour
  (CUDA when it can, else CPU) and ``cpu`` checks nothing.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from models.encoder import CUDA_EP, DeviceUnavailableError, gpu_visible

ORT_PACKAGE = "onnxruntime"
FIX = "run `make gpu-install` (removes the CPU wheel, installs onnxruntime-gpu, verifies)"


@dataclass(frozen=True)
class OrtInstall:
    """What a node's onnxruntime is: the distributions providing it and its providers."""

    distributions: tuple[str, ...]
    providers: tuple[str, ...]

    def problems(self) -> list[str]:
        """Why this install cannot run the CUDA provider reliably (empty: it can)."""
        found: list[str] = []
        if len(self.distributions) != 1:
            names = ", ".join(self.distributions) or "none"
            found.append(
                f"{len(self.distributions)} distributions provide the onnxruntime package "
                f"({names}); exactly one (onnxruntime-gpu) must"
            )
        if CUDA_EP not in self.providers:
            found.append(f"onnxruntime has no {CUDA_EP} (providers: {', '.join(self.providers)})")
        return found


def onnxruntime_distributions(
    packages: Mapping[str, Sequence[str]] | None = None,
) -> tuple[str, ...]:
    """Installed distributions that provide the ``onnxruntime`` package, sorted.

    ``packages`` is a top-level package -> distributions view of the installed metadata,
    :func:`importlib.metadata.packages_distributions` by default (tests pass their own).
    """
    view = importlib.metadata.packages_distributions() if packages is None else packages
    return tuple(sorted({name.lower() for name in view.get(ORT_PACKAGE, ())}))


def ort_install(packages: Mapping[str, Sequence[str]] | None = None) -> OrtInstall:
    """This process's onnxruntime: distributions from the metadata, providers from ORT."""
    import onnxruntime as ort

    return OrtInstall(onnxruntime_distributions(packages), tuple(ort.get_available_providers()))


def verify_gpu_install(packages: Mapping[str, Sequence[str]] | None = None) -> OrtInstall:
    """Raise :class:`DeviceUnavailableError` unless onnxruntime is one GPU distribution."""
    install = ort_install(packages)
    problems = install.problems()
    if problems:
        raise DeviceUnavailableError(f"GPU install is not usable: {'; '.join(problems)}; {FIX}")
    return install


def require_device(device: str, backend: str = "onnx") -> None:
    """Fail loudly at start when ``device`` is ``cuda`` and ``backend`` cannot run CUDA here.

    ``auto`` and ``cpu`` pass (``auto`` still picks CUDA when it can, at load time).
    """
    if (device or "auto").lower() != "cuda":
        return
    if backend == "torch":
        from models.torch_backend import torch_device

        torch_device("cuda")  # raises DeviceUnavailableError with torch's own view
        return
    if backend != "onnx":
        raise ValueError(f"embed backend must be onnx or torch, not {backend!r}")
    verify_gpu_install()
    if not gpu_visible():
        raise DeviceUnavailableError(
            "embed_device=cuda but no NVIDIA GPU is visible to this process "
            "(/dev/nvidiactl missing or CUDA_VISIBLE_DEVICES empty)"
        )
