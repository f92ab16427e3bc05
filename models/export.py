"""Export a Hugging Face checkpoint to ONNX, quantize it to int8, write a spec.

``python -m models export <hf-id | dir | package> --quantize int8`` runs the
optimum ONNX export (fp32), ONNX Runtime dynamic int8 quantization, and
writes ``model.onnx``, ``model.int8.onnx``, ``tokenizer.json`` and
``memserve_model.json`` into ``<models_dir>/<name>/``. It then embeds a fixed
sentence set with both graphs and refuses the result unless the mean cosine
between int8 and fp32 vectors reaches ``--min-cosine`` (0.99).

Before quantizing, ONNX Runtime's transformer optimizer rewrites the fp32
graph's exact (erf) GELU as ``FastGelu`` (the tanh approximation): the int8
graph then embeds ~10% more sentences/s on CPU at the same agreement with the
exact fp32 graph (``--exact-gelu`` keeps erf). ``--optimize`` additionally
fuses Attention, EmbedLayerNormalization and SkipLayerNormalization and
quantizes those to QAttention/QEmbedLayerNormalization; it is off by default
because with ONNX Runtime 1.31 on x86 (AVX-512 VNNI) that int8 graph is
15-25% slower than the unfused one, whose MatMul/Softmax attention and
LayerNorms ORT fuses well enough itself at session start (measured with
``loadtests/bench_embed.py``). ``--fp16`` derives from the same rewritten graph, ``model.onnx``
is the plain export (fp32 reference). int8 is quantised with smoothed FFN inputs (``--no-smooth``
skips it): unsmoothed, agreement sits at 0.99 and falls under it on CPUs without VNNI (AVX2).

Needs the ``export`` extra (torch, optimum, transformers); the service itself
never imports this module.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.agreement import CHECK_QUERIES, CHECK_SENTENCES, batch_consistency, compare
from models.quantize import ExportError, convert_fp16, optimize_graph, quantize_int8
from models.resolve import sha256_file
from models.smoothing import smooth_ffn_up
from models.spec import BUILTIN_SPECS, SPEC_FILE, FileRef, ModelSpec, builtin_for_hf_id
from models.versions import package_versions

__all__ = [
    "FP16_FILE",
    "FP32_FILE",
    "INT8_FILE",
    "TOKENIZER_FILE",
    "ExportResult",
    "Source",
    "default_name",
    "export",
    "read_st_config",
    "resolve_source",
]

log = logging.getLogger(__name__)

FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
FP16_FILE = "model.fp16.onnx"
TOKENIZER_FILE = "tokenizer.json"
CHECKED = len(CHECK_SENTENCES) + len(CHECK_QUERIES)


@dataclass(frozen=True)
class Source:
    """A checkpoint on disk plus the id it is known by."""

    path: Path
    model_id: str
    kind: str  # "dir" | "package" | "hub"


@dataclass
class ExportResult:
    spec: ModelSpec
    directory: Path
    mean_cosine: float | None
    min_cosine: float | None
    seconds: float


def resolve_source(source: str, *, offline: bool | None = None) -> Source:
    """A local directory, an installed package that bundles a checkpoint, or a hub id."""
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ExportError(f"{path} has no config.json: not a Hugging Face checkpoint")
        return Source(path.resolve(), source, "dir")
    module_name = source.replace("-", "_")
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module_name) and importlib.util.find_spec(
        module_name
    ):
        return Source(_package_checkpoint(module_name), source, "package")
    if "/" not in source:
        raise ExportError(f"{source!r} is neither a directory, an installed package nor a hub id")
    offline = _offline() if offline is None else offline
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(
            source,
            local_files_only=offline,
            allow_patterns=["*.json", "*.txt", "*.safetensors", "*.model", "1_Pooling/*"],
        )
    except Exception as exc:  # network or cache miss: say what to do
        raise ExportError(
            f"cannot get {source} from the Hugging Face hub ({type(exc).__name__}: {exc}); "
            "pass a local checkpoint directory instead"
        ) from exc
    return Source(Path(local), source, "hub")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _package_checkpoint(module_name: str) -> Path:
    module = importlib.import_module(module_name)
    getter = getattr(module, "get_model_path", None)
    if callable(getter):
        return Path(getter()).resolve()
    root = Path(module.__file__).parent
    for config in sorted(root.rglob("config.json")):
        if (config.parent / "tokenizer.json").is_file():
            return config.parent.resolve()
    raise ExportError(f"package {module_name} bundles no Hugging Face checkpoint")


def read_st_config(path: Path) -> dict[str, Any]:
    """Pooling, normalisation, max tokens and prompts from sentence-transformers files."""
    found: dict[str, Any] = {}
    modules = _read_json(path / "modules.json") or []
    for module in modules:
        kind = str(module.get("type", ""))
        if kind.endswith("Pooling"):
            pooling = _read_json(path / module.get("path", "") / "config.json") or {}
            if pooling.get("pooling_mode_cls_token"):
                found["pooling"] = "cls"
            elif pooling.get("pooling_mode_mean_tokens"):
                found["pooling"] = "mean"
        if kind.endswith("Normalize"):
            found["normalize"] = True
    if modules and "normalize" not in found:
        found["normalize"] = False
    st = _read_json(path / "sentence_bert_config.json") or {}
    if st.get("max_seq_length"):
        found["max_tokens"] = int(st["max_seq_length"])
    prompts = (_read_json(path / "config_sentence_transformers.json") or {}).get("prompts") or {}
    if prompts.get("query"):
        found["query_prefix"] = prompts["query"]
    config = _read_json(path / "config.json") or {}
    if config.get("hidden_size"):
        found["dim"] = int(config["hidden_size"])
    if "max_tokens" not in found and config.get("max_position_embeddings"):
        found["max_tokens"] = int(config["max_position_embeddings"])
    return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def default_name(source: Source, quantize: str) -> str:
    """Built-in name for a known hub id whose files live in the cache, else derived."""
    builtin = builtin_for_hf_id(source.model_id)
    if builtin is not None and not any(ref.package for ref in builtin.onnx):
        return builtin.name
    if source.kind == "dir":
        base = source.path.name
        if base.lower() in ("model", "checkpoint", "snapshot", "files"):
            base = source.path.parent.name
    else:
        base = source.model_id.rstrip("/").split("/")[-1]
    slug = re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-")
    return f"{slug}-{quantize}" if quantize != "none" else slug


def export(
    source: str,
    *,
    quantize: str = "int8",
    name: str | None = None,
    models_dir: Path | None = None,
    pooling: str | None = None,
    query_prefix: str | None = None,
    max_tokens: int | None = None,
    normalize: bool | None = None,
    fp16: bool = False,
    per_channel: bool = True,
    reduce_range: bool = False,
    exclude_nodes: str | None = None,
    optimize: bool = False,
    gelu_approximation: bool = True,
    smooth: bool = True,
    min_cosine: float = 0.99,
    force: bool = False,
    offline: bool | None = None,
) -> ExportResult:
    """Export ``source`` into ``<models_dir>/<name>/`` and check int8 against fp32."""
    if quantize not in ("int8", "none"):
        raise ExportError("--quantize must be int8 or none")
    started = time.perf_counter()
    src = resolve_source(source, offline=offline)
    name = name or default_name(src, quantize)
    builtin = BUILTIN_SPECS.get(name)
    if builtin is not None and any(ref.package for ref in builtin.onnx) and not force:
        raise ExportError(
            f"{name!r} is a built-in model shipped by a package; its vectors would change. "
            "Pick another --name"
        )
    if models_dir is None:
        from models.resolve import default_models_dir

        models_dir = default_models_dir()
    target = Path(models_dir) / name
    if target.exists() and not force:
        raise ExportError(f"{target} exists; pass --force to replace it")

    semantics = _semantics(src, builtin_for_hf_id(src.model_id) or builtin)
    overrides = {
        "pooling": pooling,
        "query_prefix": query_prefix,
        "max_tokens": max_tokens,
        "normalize": normalize,
    }
    semantics.update({k: v for k, v in overrides.items() if v is not None})

    Path(models_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=models_dir))
    try:
        print(f"exporting {src.model_id} ({src.path}) to ONNX ...", flush=True)
        _onnx_export(src.path, work / "optimum")
        shutil.move(str(work / "optimum" / "model.onnx"), work / FP32_FILE)
        tokenizer = work / "optimum" / TOKENIZER_FILE
        if not tokenizer.is_file():
            tokenizer = src.path / TOKENIZER_FILE
        if not tokenizer.is_file():
            raise ExportError("the checkpoint has no fast tokenizer (tokenizer.json)")
        shutil.copy2(tokenizer, work / TOKENIZER_FILE)
        for extra in ("config.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (work / "optimum" / extra).is_file():
                shutil.copy2(work / "optimum" / extra, work / extra)
        shutil.rmtree(work / "optimum")

        cpu_files = [FP32_FILE]
        excluded: list[str] = []
        smoothed: list[str] = []
        fused: dict[str, int] = {}
        base = work / FP32_FILE
        if optimize or gelu_approximation:
            print("rewriting the fp32 graph (ONNX Runtime transformer optimizer) ...", flush=True)
            base = work / ".optimized.onnx"
            fused = optimize_graph(
                work / FP32_FILE,
                base,
                src.path / "config.json",
                full=optimize,
                gelu_approximation=gelu_approximation,
            )
            print(f"fused: {fused}", flush=True)
        if quantize == "int8":
            print("quantizing to int8 (dynamic, per-channel) ...", flush=True)
            tmp = work / ".smoothed.onnx"
            if smooth:
                smoothed = smooth_ffn_up(base, tmp, work / TOKENIZER_FILE, semantics["max_tokens"])
            excluded = quantize_int8(
                tmp if smoothed else base,
                work / INT8_FILE,
                per_channel=per_channel,
                reduce_range=reduce_range,
                exclude_nodes=exclude_nodes,
            )
            tmp.unlink(missing_ok=True)
            cpu_files = [INT8_FILE, FP32_FILE]
        gpu_files = [FP32_FILE]
        if fp16:
            print("converting to fp16 for the CUDA provider ...", flush=True)
            convert_fp16(base, work / FP16_FILE)
            gpu_files = [FP16_FILE, FP32_FILE]
        if base != work / FP32_FILE:
            base.unlink()

        spec = ModelSpec(
            name=name,
            dim=int(semantics["dim"]),
            pooling=semantics["pooling"],
            max_tokens=int(semantics["max_tokens"]),
            normalize=bool(semantics["normalize"]),
            query_prefix=str(semantics["query_prefix"]),
            onnx=tuple(FileRef(f, sha256=sha256_file(work / f)) for f in cpu_files),
            onnx_gpu=tuple(FileRef(f, sha256=sha256_file(work / f)) for f in gpu_files),
            tokenizer=(FileRef(TOKENIZER_FILE, sha256=sha256_file(work / TOKENIZER_FILE)),),
            hf_id=src.model_id if src.kind == "hub" else semantics.get("hf_id"),
            description=f"exported from {src.model_id} ({quantize})",
        )
        mean_cos = min_cos = batch_mean = batch_min = None
        if quantize == "int8":
            mean_cos, min_cos = compare(spec.with_base_dir(work), INT8_FILE, FP32_FILE)
            print(
                f"int8 vs fp32 on {CHECKED} texts (passages and queries): "
                f"mean cosine {mean_cos:.5f}, min {min_cos:.5f} (required mean >= {min_cosine})",
                flush=True,
            )
            batch_mean, batch_min = batch_consistency(spec.with_base_dir(work), INT8_FILE)
            print(
                f"int8 batched vs alone: mean cosine {batch_mean:.5f}, min {batch_min:.5f}",
                flush=True,
            )
            if mean_cos < min_cosine:
                raise ExportError(
                    f"int8 model disagrees with fp32: mean cosine {mean_cos:.5f} < {min_cosine}"
                )
        data = spec.to_json()
        data["export"] = {
            "source": src.model_id,
            "source_kind": src.kind,
            "quantize": quantize,
            "per_channel": per_channel,
            "reduce_range": reduce_range,
            "fused_ops": fused,
            "gelu": "tanh approximation" if gelu_approximation else "exact",
            "fp32_nodes": excluded,
            "smoothed_nodes": smoothed,
            "int8_vs_fp32_mean_cosine": mean_cos,
            "int8_vs_fp32_min_cosine": min_cos,
            "int8_batched_vs_alone_mean_cosine": batch_mean,
            "int8_batched_vs_alone_min_cosine": batch_min,
            "check_sentences": CHECKED,
            "versions": package_versions(
                ("torch", "transformers", "optimum", "optimum-onnx", "onnx", "onnxruntime")
            ),
        }
        (work / SPEC_FILE).write_text(json.dumps(data, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    spec = ModelSpec.load(target / SPEC_FILE)
    elapsed = time.perf_counter() - started
    print(f"wrote {target} ({spec.name}, {spec.dim}-d, {spec.pooling} pooling) in {elapsed:.1f}s")
    return ExportResult(spec, target, mean_cos, min_cos, elapsed)


def _semantics(src: Source, builtin: ModelSpec | None) -> dict[str, Any]:
    found = read_st_config(src.path)
    semantics: dict[str, Any] = {
        "pooling": "mean",
        "normalize": True,
        "query_prefix": "",
        "max_tokens": 512,
    }
    if builtin is not None:
        semantics.update(
            pooling=builtin.pooling,
            normalize=builtin.normalize,
            query_prefix=builtin.query_prefix,
            max_tokens=builtin.max_tokens,
            dim=builtin.dim,
            hf_id=builtin.hf_id,
        )
    # The checkpoint's own sentence-transformers config wins over defaults,
    # but a built-in's query prefix (e.g. BGE's instruction) is kept.
    for key, value in found.items():
        if key == "query_prefix" and builtin is not None and builtin.query_prefix:
            continue
        semantics[key] = value
    if "dim" not in semantics:
        raise ExportError("cannot tell the embedding dimension (no hidden_size in config.json)")
    return semantics


def _onnx_export(checkpoint: Path, output: Path) -> None:
    """optimum's exporter, feature-extraction task: outputs last_hidden_state."""
    try:
        from optimum.exporters.onnx import main_export
    except ImportError as exc:
        raise ExportError("the export needs the export extra: pip install -e '.[export]'") from exc
    main_export(
        str(checkpoint),
        output=str(output),
        task="feature-extraction",
        library_name="transformers",
        local_files_only=True,
        do_validation=False,
        device="cpu",
    )
    if not (output / "model.onnx").is_file():
        raise ExportError(f"optimum wrote no model.onnx into {output}")
