"""The PyTorch encoder backend (``MEMSERVE_EMBED_BACKEND=torch``): same spec, other runtime.

For GPU nodes whose image has PyTorch but not ``onnxruntime-gpu`` (and the lent GPU
GPU machines). :class:`TorchEncoder` is an :class:`~models.encoder.Encoder`
in everything but the forward pass: the same tokenizer, truncation, query prefix,
length-sorted sub-batches, pooling and normalisation, so its vectors go in the same
table as the ONNX encoder's (tests/models/test_torch_backend.py checks the agreement).

Weights come from a directory written by ``python -m models torch-export`` (an fp16
copy of a checkpoint as safetensors, its ``config.json``, the spec's ``tokenizer.json``
and a manifest, :data:`TORCH_MANIFEST`, naming the spec and the files' sha256). The
manifest ties the weights to one spec: weights of another model, or a changed file,
are refused rather than filling a table with vectors from a different model.

CUDA runs fp16 (fp32 on request), CPU runs fp32. Pooling runs on the device, so only
(batch, dim) vectors cross back to the host. Imports torch and transformers only when
an encoder is opened: ``models`` stays importable without them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import numpy as np

from models.encoder import (
    CPU_BATCH_TOKENS,
    GPU_BATCH_TOKENS,
    DeviceUnavailableError,
    Encoder,
)
from models.resolve import cached_sha256
from models.spec import ModelSpec

log = logging.getLogger(__name__)

TORCH_MANIFEST = "memserve_torch.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
TORCH_DIR = "torch-fp16"  # default place: <models cache>/<spec name>/torch-fp16
#: Texts per run on CUDA when not set: a GPU is fed best by big runs, and the
#: token cap (:data:`~models.encoder.GPU_BATCH_TOKENS`) still bounds long ones.
GPU_BATCH_SIZE = 512
#: Spec fields that change the vectors; the manifest must agree on each.
_SEMANTIC = ("dim", "pooling", "normalize", "query_prefix", "max_tokens")

Precision = Literal["auto", "fp16", "fp32"]


class TorchWeightsError(RuntimeError):
    """A torch weights directory that is missing, incomplete or not the spec's model."""


def default_weights_dir(spec: ModelSpec, models_dir: Path | None = None) -> Path:
    """``<models cache>/<spec name>/torch-fp16``: where torch-export writes by default."""
    if models_dir is None:
        from models.resolve import default_models_dir

        models_dir = default_models_dir()
    return Path(models_dir) / spec.name / TORCH_DIR


def manifest_for(spec: ModelSpec, source: str, dtype: str, files: dict[str, str]) -> dict:
    """The manifest torch-export writes: the spec's semantics and each file's sha256."""
    return {
        "format": 1,
        "spec": spec.name,
        **{field: getattr(spec, field) for field in _SEMANTIC},
        "source": source,
        "dtype": dtype,
        "sha256": files,
    }


def check_weights_dir(directory: Path, spec: ModelSpec) -> dict[str, Any]:
    """The manifest of ``directory`` after checking it belongs to ``spec`` and its files hash
    to the recorded values; raises :class:`TorchWeightsError` saying what is wrong."""
    path = Path(directory) / TORCH_MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TorchWeightsError(
            f"no readable {TORCH_MANIFEST} in {directory} ({exc}); write the weights with "
            f"`python -m models torch-export --model {spec.name} --out {directory}`"
        ) from exc
    if manifest.get("spec") != spec.name:
        raise TorchWeightsError(
            f"{directory} holds torch weights of {manifest.get('spec')!r}, not {spec.name!r}: "
            "vectors of another model would not match the stored ones"
        )
    differ = [f for f in _SEMANTIC if manifest.get(f) != getattr(spec, f)]
    if differ:
        raise TorchWeightsError(
            f"{directory}: the manifest differs from spec {spec.name} in {', '.join(differ)}"
        )
    for name, expected in (manifest.get("sha256") or {}).items():
        file = Path(directory) / name
        if not file.is_file():
            raise TorchWeightsError(f"{file} is missing (listed in {TORCH_MANIFEST})")
        actual = cached_sha256(file)
        if actual != expected:
            raise TorchWeightsError(
                f"sha256 mismatch for {file}: expected {expected}, got {actual}; "
                "write the weights again with `python -m models torch-export`"
            )
    for name in (WEIGHTS_FILE, TOKENIZER_FILE, CONFIG_FILE):
        if name not in (manifest.get("sha256") or {}):
            raise TorchWeightsError(f"{TORCH_MANIFEST} in {directory} does not pin {name}")
    return manifest


def torch_device(device: str) -> str:
    """``cuda`` or ``cpu`` for a device setting; ``cuda`` without a usable GPU is an error."""
    import torch

    device = (device or "auto").lower()
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"embed device must be auto, cpu or cuda, not {device!r}")
    if device == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise DeviceUnavailableError(
            "embed_device=cuda with backend torch, but torch sees no CUDA device "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"
        )
    return "cpu"


# On CUDA a run's token axis is padded to a multiple of this: fp16 tensor-core GEMMs want
# aligned shapes, and fewer distinct shapes means fewer first-use kernel selections (the
# first H100 run, unpadded, had fp16 p50 53 ms at batch 1 x 200 tokens vs fp32's 4 ms).
CUDA_TOKEN_MULTIPLE = 16


def pad_tokens(input_ids: np.ndarray, mask: np.ndarray, multiple: int) -> tuple[np.ndarray, ...]:
    """``input_ids``/``mask`` right-padded (id 0, mask 0) to a multiple of ``multiple``
    tokens; masked positions change neither attention nor mean/CLS pooling."""
    extra = -input_ids.shape[1] % multiple
    if not extra:
        return input_ids, mask
    widths = ((0, 0), (0, extra))
    return np.pad(input_ids, widths), np.pad(mask, widths)


class TorchEncoder(Encoder):
    """An :class:`Encoder` whose runs are a PyTorch (transformers) forward pass."""

    backend = "torch"

    def __init__(
        self,
        spec: ModelSpec,
        model: Any,
        tokenizer: Any,
        *,
        device: str,
        dtype: str,
        max_batch_tokens: int,
        max_batch_size: int,
        weights_dir: Path | None = None,
    ) -> None:
        self._init_batching(
            spec,
            tokenizer,
            device=device,
            max_batch_tokens=max_batch_tokens,
            max_batch_size=max_batch_size,
            parallel=1,  # one run at a time: torch threads (CPU) or the GPU stream
        )
        self.onnx_path = None
        self.weights_dir = weights_dir
        self.dtype = dtype
        self._model = model

    def _forward(
        self, input_ids: np.ndarray, mask: np.ndarray, weights: np.ndarray | None = None
    ) -> np.ndarray:
        """See :meth:`Encoder._forward`; ``weights``: views' pooling rows (mean pooling)."""
        import torch

        if self.device == "cuda":
            input_ids, mask = pad_tokens(input_ids, mask, CUDA_TOKEN_MULTIPLE)
            if weights is not None:  # padded tokens pool nothing
                extra = input_ids.shape[1] - weights.shape[2]
                weights = np.pad(weights, ((0, 0), (0, 0), (0, extra)))
        with torch.inference_mode():
            ids = torch.from_numpy(input_ids).to(self.device, non_blocking=True)
            attention = torch.from_numpy(mask).to(self.device, non_blocking=True)
            hidden = self._model(
                input_ids=ids, attention_mask=attention, token_type_ids=torch.zeros_like(ids)
            ).last_hidden_state.float()  # pool in fp32 whatever the weights are
            if weights is not None:
                w = torch.from_numpy(weights).to(self.device, hidden.dtype)  # (batch, views, tok)
                return (
                    (torch.bmm(w, hidden) / w.sum(dim=2, keepdim=True).clamp_min(1e-9))
                    .cpu()
                    .numpy()
                )
            if self.spec.pooling == "cls":
                vectors = hidden[:, 0, :]
            else:
                ones = attention.to(hidden.dtype).unsqueeze(1)  # (batch, 1, tokens)
                summed = torch.bmm(ones, hidden)[:, 0, :]
                vectors = summed / ones.sum(dim=2).clamp_min(1e-9)
            return vectors.cpu().numpy()


def load_torch_model(directory: Path, device: str, dtype: str) -> Any:
    """The transformers model of a weights directory, on ``device`` in ``dtype``, eval mode.

    Built from its config and loaded with ``load_state_dict`` (not ``from_pretrained``,
    whose dtype defaults differ between transformers versions); a missing or unexpected
    tensor is an error, the pooler head (unused: pooling is the spec's) excepted.
    """
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    model = AutoModel.from_config(config, add_pooling_layer=False)
    state = load_file(str(Path(directory) / WEIGHTS_FILE))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise TorchWeightsError(
            f"{directory}/{WEIGHTS_FILE} does not fit its config: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    torch_dtype = torch.float16 if dtype == "fp16" else torch.float32
    return model.to(device=device, dtype=torch_dtype).eval()


def open_torch_encoder(
    spec: ModelSpec,
    device: str = "auto",
    threads: int | None = None,
    *,
    weights_dir: Path | None = None,
    models_dir: Path | None = None,
    max_batch_tokens: int | None = None,
    max_batch_size: int | None = None,
    precision: Precision = "auto",
) -> TorchEncoder:
    """A :class:`TorchEncoder` for ``spec`` from its checked weights directory.

    ``weights_dir`` defaults to :func:`default_weights_dir`. ``precision`` auto is fp16 on
    CUDA and fp32 on CPU (fp16 matmuls on CPU are slow and gain nothing). ``threads`` sets
    torch's intra-op threads (process-wide) on CPU. Batch caps default as in
    :func:`models.loader.load_encoder`, with :data:`GPU_BATCH_SIZE` texts per CUDA run.
    """
    import torch
    from tokenizers import Tokenizer

    directory = Path(weights_dir) if weights_dir else default_weights_dir(spec, models_dir)
    check_weights_dir(directory, spec)
    where = torch_device(device)
    dtype = ("fp16" if where == "cuda" else "fp32") if precision == "auto" else precision
    if where == "cpu" and threads:
        torch.set_num_threads(int(threads))
    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=spec.max_tokens)
    model = load_torch_model(directory, where, dtype)
    on_gpu = where == "cuda"
    log.info("encoder %s on %s via torch %s (%s)", spec.name, where, dtype, directory)
    return TorchEncoder(
        spec,
        model,
        tokenizer,
        device=where,
        dtype=dtype,
        max_batch_tokens=max_batch_tokens or (GPU_BATCH_TOKENS if on_gpu else CPU_BATCH_TOKENS),
        max_batch_size=max_batch_size or (GPU_BATCH_SIZE if on_gpu else 64),
        weights_dir=directory,
    )
