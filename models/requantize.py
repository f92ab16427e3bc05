"""First start of a shipped model: build (or find) a verified int8 copy in the models cache.

The embedded default model stores int8 weights but casts them to float, so it
computes in fp32. :func:`prepare_model` folds the casts (ONNX Runtime basic
graph optimisation), re-quantises the graph with dynamic int8 following the
spec's :data:`RECIPES` entry (``quantize_dynamic``, SmoothQuant of chosen
MatMuls, activation scales that see one token only; no torch), checks that
its vectors agree with the shipped graph's (mean cosine >=
:data:`MIN_MEAN_COSINE` on a fixed set of passages and queries) and, for a
recipe with ``row_scales``, that a text gets the same vector alone and in a
batch, and returns a spec that runs the copy. It refuses a copy that fails
either check, and never uses it.

The copy lives in ``<models_dir>/<name>/model.<mode>-<recipe digest>.onnx``
with a JSON manifest beside it (recipe, smoothed and fp32 nodes, source and
copy sha256, activation scales, onnxruntime version, measured agreement and
batch consistency),
so a changed mode or recipe builds a new copy. It is reused only while the
source and the copy still hash to the manifest's values; otherwise it is
rebuilt. Several processes (embedder replicas at first start) may call this
at once: a file lock serialises them, and files are written to a temporary
name and renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.resolve import (
    ChecksumMismatchError,
    cached_sha256,
    default_models_dir,
    get_spec,
    locate_onnx,
    sha256_file,
    verify_sha256,
)
from models.smoothing import CALIBRATION_TEXTS, Role
from models.spec import FileRef, ModelSpec, ModelSpecError

log = logging.getLogger(__name__)

#: Mean cosine the copy must reach against the shipped graph on the fixed set.
MIN_MEAN_COSINE = 0.99
#: Min cosine of a text alone vs in a batch for a recipe with ``row_scales`` (float noise only).
MIN_BATCH_COSINE = 0.99999
MANIFEST_FORMAT = 3


@dataclass(frozen=True)
class Recipe:
    """How a mode quantises: weight scales, smoothed roles, fp32 (role, layer)s, activations."""

    per_channel: bool
    smooth: tuple[Role, ...] = ()
    alpha: float = 0.7
    keep_fp32: tuple[tuple[Role, int], ...] = ()
    #: Activation scales that see one token only (models.rowscales): batch-independent vectors.
    row_scales: bool = False
    #: Erf GELU subgraphs as one Gelu op (same function, faster).
    fuse_gelu: bool = False

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def digest(self) -> str:
        """Short hash of the recipe and its calibration texts: part of the copy's file name."""
        data = json.dumps([self.to_json(), CALIBRATION_TEXTS], sort_keys=True)
        return hashlib.sha256(data.encode()).hexdigest()[:10]


#: MiniLM-L6 on 2 cores (1 thread, VNNI CPU; agreement on the fixed set, batch
#: consistency = a text alone vs in a mixed batch of 32, CPU ms per encode):
#:
#: ==================  ===========  ===========  ==========  ========
#: mode                mean / min   batch cons.  1 query     batch 32
#: ==================  ===========  ===========  ==========  ========
#: shipped graph       1 / 1        1.0          4.4 ms      188 ms
#: per_channel         .992 / .960  .989 / .949  1.9 ms      112 ms
#: (smoothed)          .996 / .979  .996 / .979  2.0 ms      117 ms
#: (FFN up in fp32)    .995 / .977  .996 / .978  2.6 ms      140 ms
#: per_channel_smooth  .997 / .983  1.0 / 1.0    (see below)
#: per_tensor          ~.88         -            -           -
#: ==================  ===========  ===========  ==========  ========
#:
#: ``per_channel_smooth`` smooths every FFN up-projection (its LayerNorm input
#: has outlier channels), gives each activation a scale that sees one token
#: only (``row_scales``, models.rowscales; with per-token scales layer 0's FFN
#: down-projection no longer needs fp32) and fuses GELU. Against the previous
#: recipe (one activation scale per run, layer 0's down-projection in fp32;
#: "smoothed" above), loadtests/bench_embed.py (2 runs each, sentences/s)
#: gives +4% single texts, +5..11% short batches, +5..11% long batches; a
#: text's vector is the same alone and in a batch of 64 (1 - cosine < 1e-6,
#: was up to .007); on 300 LoCoMo texts the mean / min cosine to the shipped
#: graph is .9978 / .9962 (was .9966 / .9935), dense LoCoMo R@10 .446 (was
#: .451 batched, .444 one text at a time; fp32 .450), BEIR dense nDCG@10
#: msmarco .703 / dbpedia .478 (was .697 / .475; fp32 .703 / .478).
#: loadtests/eval_requant.py measures the LoCoMo figures.
RECIPES: dict[str, Recipe] = {
    "per_channel": Recipe(per_channel=True),
    "per_tensor": Recipe(per_channel=False),
    "per_channel_smooth": Recipe(
        per_channel=True,
        smooth=("ffn_up",),
        alpha=0.7,
        row_scales=True,
        fuse_gelu=True,
    ),
}


class RequantizeError(ModelSpecError):
    """The re-quantised copy could not be built or disagrees with its source: not used."""


@dataclass(frozen=True)
class QuantizedCopy:
    """A verified copy: its file, sha256 and manifest; ``built`` if this call made it."""

    path: Path
    sha256: str
    manifest: dict[str, Any]
    built: bool = False


def prepare_model(
    name_or_dir: str | os.PathLike[str] | ModelSpec, models_dir: Path | None = None
) -> ModelSpec:
    """The spec to run: for a spec with ``requantize``, one whose CPU graph is the verified copy.

    Idempotent and cheap once the copy exists (a hash check under a lock).
    Other specs come back unchanged. The returned spec keeps the name (same
    vector table); its GPU candidates stay the shipped files.
    Raises :class:`RequantizeError` when the copy disagrees with the source.
    """
    spec = (
        name_or_dir
        if isinstance(name_or_dir, ModelSpec)
        else get_spec(name_or_dir, models_dir=models_dir)
    )
    if spec.requantize is None:
        return spec
    copy = ensure_quantized_copy(spec, models_dir)
    return dataclasses.replace(
        spec,
        onnx=(FileRef(str(copy.path), sha256=copy.sha256),),
        onnx_gpu=spec.onnx_gpu + spec.onnx,
        requantize=None,
    )


def ensure_quantized_copy(spec: ModelSpec, models_dir: Path | None = None) -> QuantizedCopy:
    """Find the spec's verified copy in the models cache, or build it."""
    mode = spec.requantize
    if mode is None:
        raise RequantizeError(f"{spec.name} asks for no re-quantisation")
    cache = Path(models_dir) if models_dir is not None else default_models_dir()
    source, ref = locate_onnx(spec, gpu=False, models_dir=cache)
    # A ref with a sha256 was just verified against it; hash only an unpinned source.
    source_sha = ref.sha256.lower() if ref.sha256 else cached_sha256(source)
    directory = cache / spec.name
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"model.{mode}-{RECIPES[mode].digest()}"
    copy, manifest_path = directory / f"{stem}.onnx", directory / f"{stem}.json"
    with _file_lock(directory / f".{stem}.lock"):
        found = _reusable(copy, manifest_path, source_sha, mode)
        if found is not None:
            return found
        return _build(spec, source, source_sha, copy, manifest_path, cache)


def _reusable(copy: Path, manifest_path: Path, source_sha: str, mode: str) -> QuantizedCopy | None:
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == MANIFEST_FORMAT
        and manifest.get("mode") == mode
        and manifest.get("recipe") == RECIPES[mode].to_json()
        and manifest.get("source_sha256") == source_sha
        and isinstance(manifest.get("mean_cosine"), float)
        and manifest["mean_cosine"] >= MIN_MEAN_COSINE
        and isinstance(manifest.get("sha256"), str)
        and (not RECIPES[mode].row_scales or _batch_independent(manifest.get("batch_min_cosine")))
        and copy.is_file()
    ):
        return None
    try:
        verify_sha256(copy, manifest["sha256"])
    except ChecksumMismatchError as exc:
        log.warning("re-quantised copy is damaged, rebuilding it: %s", exc)
        return None
    return QuantizedCopy(copy, manifest["sha256"], manifest)


def _build(
    spec: ModelSpec, source: Path, source_sha: str, copy: Path, manifest_path: Path, cache: Path
) -> QuantizedCopy:
    import onnxruntime as ort

    from models.agreement import CHECK_QUERIES, CHECK_SENTENCES, batch_consistency, compare
    from models.quantize import fold_constants

    mode = spec.requantize
    assert mode is not None
    started = time.perf_counter()
    log.info("re-quantising %s (%s) from %s into %s", spec.name, mode, source, copy)
    with tempfile.TemporaryDirectory(prefix=f".{copy.stem}.", dir=copy.parent) as tmp:
        folded, candidate = Path(tmp) / "folded.onnx", Path(tmp) / "model.onnx"
        try:
            fold_constants(source, folded)
            smoothed, fp32, scales = _quantize(spec, RECIPES[mode], folded, candidate, cache)
            mean, low = compare(spec, source, candidate)
            batch_mean, batch_low = batch_consistency(spec, candidate)
        except Exception as exc:
            raise RequantizeError(
                f"cannot re-quantise {spec.name} from {source}: {type(exc).__name__}: {exc}"
            ) from exc
        texts = len(CHECK_SENTENCES) + len(CHECK_QUERIES)
        if mean < MIN_MEAN_COSINE:
            raise RequantizeError(
                f"the {mode} int8 copy of {spec.name} disagrees with the shipped graph "
                f"{source}: mean cosine {mean:.4f} (min {low:.4f}) on {texts} fixed passages "
                f"and queries, below the required {MIN_MEAN_COSINE}. Its vectors would not "
                "match those of the shipped model, so it is not used (onnxruntime "
                f"{ort.__version__}); run the shipped graph by clearing the spec's requantize"
            )
        if RECIPES[mode].row_scales and not _batch_independent(batch_low):
            raise RequantizeError(
                f"the {mode} int8 copy of {spec.name} gives a text another vector inside a "
                f"batch than alone: min cosine {batch_low:.6f}, below {MIN_BATCH_COSINE} "
                f"(onnxruntime {ort.__version__}); it is not used"
            )
        sha = sha256_file(candidate)
        manifest = {
            "format": MANIFEST_FORMAT,
            "model": spec.name,
            "mode": mode,
            "recipe": RECIPES[mode].to_json(),
            "smoothed_nodes": smoothed,
            "fp32_nodes": fp32,
            "activation_scales": scales,
            "source": str(source),
            "source_sha256": source_sha,
            "sha256": sha,
            "onnxruntime": ort.__version__,
            "mean_cosine": round(mean, 6),
            "min_cosine": round(low, 6),
            "min_mean_cosine": MIN_MEAN_COSINE,
            "texts": texts,
            # a text alone vs in a batch: 1.0 with row_scales, less with per-run scales
            "batch_mean_cosine": round(batch_mean, 6),
            "batch_min_cosine": round(batch_low, 6),
            "built_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "build_s": round(time.perf_counter() - started, 2),
        }
        staged_manifest = Path(tmp) / "manifest.json"
        staged_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
        # The copy first: a manifest never names a copy that is not in place.
        os.replace(candidate, copy)
        os.replace(staged_manifest, manifest_path)
    log.info(
        "re-quantised %s in %.1fs: mean cosine %.4f (min %.4f) to the shipped graph",
        spec.name,
        manifest["build_s"],
        mean,
        low,
    )
    return QuantizedCopy(copy, sha, manifest, built=True)


def _batch_independent(batch_min_cosine: object) -> bool:
    return isinstance(batch_min_cosine, float) and batch_min_cosine >= MIN_BATCH_COSINE


def _quantize(
    spec: ModelSpec, recipe: Recipe, folded: Path, out: Path, cache: Path
) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Apply ``recipe`` to the folded graph (smoothed in place).

    Returns the smoothed and the fp32-kept MatMuls and, with ``row_scales``,
    the activations with fixed and with per-token scales.
    """
    import re

    import onnx

    from models.quantize import fuse_gelu, quantize_int8
    from models.rowscales import layernorm_fed, rescale_activations, tensor_ranges
    from models.smoothing import matmul_roles, nodes_by_role, smooth_matmuls

    roles = matmul_roles(onnx.load(str(folded), load_external_data=False))
    smoothed = [name for role in recipe.smooth for name in nodes_by_role(roles, role)]
    fp32 = [nodes_by_role(roles, role, [layer])[0] for role, layer in recipe.keep_fp32]
    if smoothed:
        feeds = _calibration_feeds(spec, cache)
        smooth_matmuls(folded, folded, smoothed, feeds, alpha=recipe.alpha)
    exclude = "^(" + "|".join(re.escape(n) for n in fp32) + ")$" if fp32 else None
    dynamic = out.with_name(f"{out.stem}.dynamic.onnx")
    quantize_int8(folded, dynamic, per_channel=recipe.per_channel, exclude_nodes=exclude)
    if recipe.fuse_gelu:
        fuse_gelu(dynamic, dynamic)
    scales: dict[str, list[str]] = {}
    if recipe.row_scales:
        # The fixed scales: ranges of the smoothed fp32 graph, one calibration text per run.
        tensors = layernorm_fed(onnx.load(str(dynamic), load_external_data=False))
        ranges = tensor_ranges(folded, tensors, _calibration_feeds(spec, cache))
        scales = rescale_activations(dynamic, out, ranges)
        dynamic.unlink()
    else:
        os.replace(dynamic, out)
    return smoothed, fp32, scales


def _calibration_feeds(spec: ModelSpec, cache: Path) -> Iterator[dict[str, Any]]:
    """One graph input per calibration text (no padding to skew the maxima)."""
    from models.resolve import resolve_tokenizer
    from models.smoothing import calibration_feeds

    return calibration_feeds(resolve_tokenizer(spec, models_dir=cache), spec.max_tokens)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), across processes."""
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
