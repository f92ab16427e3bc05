"""Find a spec by name or directory and locate its files, checking sha256.

Search order for a spec name: a directory path, the models cache
(``<models_dir>/<name>/memserve_model.json``, written by the export CLI),
then the built-in specs. A file is looked up in the spec's own directory,
then its Python package, then ``<models_dir>/<name>/``. Nothing is ever
downloaded: a missing file is an error that says where it looked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from models.spec import BUILTIN_SPECS, SPEC_FILE, FileRef, ModelSpec, ModelSpecError


class ModelFileNotFoundError(FileNotFoundError):
    """None of a spec's candidate files exists in any searched place."""


class ChecksumMismatchError(RuntimeError):
    """A model file differs from its published sha256: never run it."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        super().__init__(
            f"sha256 mismatch for {path}: expected {expected}, got {actual}. "
            "The file is corrupt, truncated or a different model; replace it "
            "(vectors from another file would not match the stored ones)."
        )
        self.path = path
        self.expected = expected
        self.actual = actual


# Fields that change the vectors: a cached spec that reuses a built-in name
# must agree with the built-in on all of them.
_SEMANTIC_FIELDS = ("dim", "pooling", "normalize", "query_prefix")


def default_models_dir() -> Path:
    """The models cache from settings (``MEMSERVE_MODELS_CACHE`` / data dir)."""
    from serve_app.settings import get_settings

    return get_settings().models_dir


def get_spec(name_or_dir: str | os.PathLike[str], models_dir: Path | None = None) -> ModelSpec:
    """The spec for a built-in name, a models-cache name or a model directory."""
    text = str(name_or_dir).strip()
    if not text:
        raise ModelSpecError("empty model name")
    path = Path(text).expanduser()
    if path.is_dir():
        return _spec_from_dir(path)
    if os.sep in text or text.endswith(".json"):
        if path.is_file() and path.name.endswith(".json"):
            return ModelSpec.load(path)
        raise ModelSpecError(f"model directory {path} does not exist")

    cache = Path(models_dir) if models_dir is not None else _safe_models_dir()
    if cache is not None and (cache / text / SPEC_FILE).is_file():
        spec = ModelSpec.load(cache / text / SPEC_FILE)
        _check_against_builtin(spec)
        return spec
    if text in BUILTIN_SPECS:
        return BUILTIN_SPECS[text]
    known = sorted(BUILTIN_SPECS) + sorted(_cached_names(cache))
    raise ModelSpecError(f"unknown embedding model {text!r}; known: {', '.join(known)}")


def _safe_models_dir() -> Path | None:
    try:
        return default_models_dir()
    except Exception:  # settings unreadable: built-ins still work
        return None


def _cached_names(cache: Path | None) -> list[str]:
    if cache is None or not cache.is_dir():
        return []
    return [p.parent.name for p in cache.glob(f"*/{SPEC_FILE}")]


def _spec_from_dir(path: Path) -> ModelSpec:
    """A directory holds a spec file, or is a known model's files (e.g. HF layout)."""
    if (path / SPEC_FILE).is_file():
        spec = ModelSpec.load(path / SPEC_FILE)
        _check_against_builtin(spec)
        return spec
    if path.name in BUILTIN_SPECS:
        return BUILTIN_SPECS[path.name].with_base_dir(path)
    hf_id = _hf_id_from_config(path)
    for spec in BUILTIN_SPECS.values():
        if hf_id and spec.hf_id and spec.hf_id.lower() == hf_id.lower():
            return spec.with_base_dir(path)
    raise ModelSpecError(
        f"{path} has no {SPEC_FILE} and is not a known model; "
        "export it with `python -m models export` or name a built-in spec"
    )


def _hf_id_from_config(path: Path) -> str | None:
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    value = data.get("_name_or_path")
    return value if isinstance(value, str) else None


def _check_against_builtin(spec: ModelSpec) -> None:
    builtin = BUILTIN_SPECS.get(spec.name)
    if builtin is None:
        return
    diff = [f for f in _SEMANTIC_FIELDS if getattr(spec, f) != getattr(builtin, f)]
    if diff:
        raise ModelSpecError(
            f"model spec {spec.base_dir} reuses the built-in name {spec.name!r} "
            f"but differs in {', '.join(diff)}; give it another name"
        )


def _package_root(package: str) -> Path | None:
    """Directory of an installed package, without importing it."""
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    if found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    return Path(found.origin).parent if found.origin else None


def candidate_paths(spec: ModelSpec, ref: FileRef, models_dir: Path | None = None) -> list[Path]:
    """Where ``ref`` may be, in search order."""
    places: list[Path] = []
    if spec.base_dir is not None:
        places.append(spec.base_dir / ref.path)
    if ref.package:
        root = _package_root(ref.package)
        if root is not None:
            places.append(root / ref.path)
    cache = Path(models_dir) if models_dir is not None else _safe_models_dir()
    if cache is not None:
        places.append(cache / spec.name / ref.path)
    return places


def resolve_file(
    spec: ModelSpec,
    refs: Sequence[FileRef],
    *,
    what: str,
    models_dir: Path | None = None,
    verify: bool = True,
) -> Path:
    """The first existing file among ``refs`` (each searched everywhere), verified."""
    return locate_file(spec, refs, what=what, models_dir=models_dir, verify=verify)[0]


def locate_file(
    spec: ModelSpec,
    refs: Sequence[FileRef],
    *,
    what: str,
    models_dir: Path | None = None,
    verify: bool = True,
) -> tuple[Path, FileRef]:
    """:func:`resolve_file` plus the ref that matched (its ``sha256`` is the verified hash)."""
    looked: list[Path] = []
    for ref in refs:
        for place in candidate_paths(spec, ref, models_dir):
            looked.append(place)
            if place.is_file():
                if verify and ref.sha256:
                    verify_sha256(place, ref.sha256)
                return place, ref
    where = "\n  ".join(str(p) for p in looked) or "(no place to look)"
    raise ModelFileNotFoundError(
        f"{what} of embedding model {spec.name!r} not found; looked in:\n  {where}\n"
        f"Put the file in one of these places (or export one with `python -m models export`)."
    )


def resolve_onnx(spec: ModelSpec, *, gpu: bool = False, models_dir: Path | None = None) -> Path:
    return locate_onnx(spec, gpu=gpu, models_dir=models_dir)[0]


def locate_onnx(
    spec: ModelSpec, *, gpu: bool = False, models_dir: Path | None = None
) -> tuple[Path, FileRef]:
    """The ONNX file to run and the ref it was found by (sha256-checked when the ref has one)."""
    refs = (spec.onnx_gpu + spec.onnx) if gpu else spec.onnx
    return locate_file(spec, _dedupe(refs), what="ONNX file", models_dir=models_dir)


def resolve_tokenizer(spec: ModelSpec, models_dir: Path | None = None) -> Path:
    return resolve_file(spec, spec.tokenizer, what="tokenizer.json", models_dir=models_dir)


def _dedupe(refs: Sequence[FileRef]) -> list[FileRef]:
    seen: list[FileRef] = []
    for ref in refs:
        if ref not in seen:
            seen.append(ref)
    return seen


_hashes: dict[tuple[str, int, int], str] = {}
_hashes_lock = threading.Lock()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in this process.

    Several encoders in one process (and the re-quantiser's source check) then
    hash a model file once.
    """
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _hashes_lock:
        known = _hashes.get(key)
    if known is None:
        known = sha256_file(path)
        with _hashes_lock:
            _hashes[key] = known
    return known


def verify_sha256(path: Path, expected: str) -> None:
    """Raise :class:`ChecksumMismatchError` unless ``path`` hashes to ``expected``."""
    actual = cached_sha256(path)
    if actual != expected.lower():
        raise ChecksumMismatchError(path, expected.lower(), actual)


def spec_with_files(spec: ModelSpec, onnx: Path, tokenizer: Path | None = None) -> ModelSpec:
    """A copy of ``spec`` that runs the given local files as they are: for tests/tools.

    No checksum and no re-quantisation (``requantize`` is cleared).
    """
    onnx = Path(onnx).resolve()
    tok = Path(tokenizer).resolve() if tokenizer else None
    return dataclasses.replace(
        spec,
        onnx=(FileRef(str(onnx)),),
        onnx_gpu=(),
        requantize=None,
        tokenizer=(FileRef(str(tok)),) if tok else spec.tokenizer,
        base_dir=spec.base_dir if tok is None else None,
    )
