"""The ``.gpu/`` folder a GPU check carries, and the BEIR/benchmark inputs read from it.

``make gpu-prepare`` (``python loadtests/gpu_bundle.py``) fills it on a machine with
the whole project; ``loadtests/gpu_check.py`` unpacks it on a bare GPU machine (numpy,
torch, transformers, tokenizers, onnxruntime only). The files (~70 MiB) go into one
``bundle.tar.xz`` (~57 MiB: one device call carries at most 64 MiB), with its manifest
``bundle.json`` beside it and inside it:

- ``torch-fp16/``: the default model's fp16 weights (``python -m models torch-export``);
- ``onnx-int8/``: the verified int8 copy the service runs on CPU (``prepare_model``),
  its manifest and the spec's tokenizer, so the CPU encoder there is the service's;
- ``ir/<set>/``: the BEIR sets of ../shared/data/ir (corpus, queries, qrels);
- ``bundle.json``: sha256 of every file, and the commit it was made from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.resolve import sha256_file as sha256  # noqa: E402 (stdlib + models.spec only)

BUNDLE = REPO / ".gpu"
MANIFEST = "bundle.json"
ARCHIVE = "bundle.tar.xz"
IR_SETS = ("agentset_msmarco", "agentset_dbpedia")
MAX_BYTES = 64 * 1024 * 1024  # what one device call may carry


def read_jsonl(path: Path) -> list[dict]:
    # "\n" only: BEIR texts hold U+2028, which str.splitlines() also splits on
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for row in path.read_text().split("\n")[1:]:
        parts = row.split("\t")
        if len(parts) == 3 and int(parts[2]) > 0:
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return qrels


def verify(bundle: Path) -> dict:
    """The bundle manifest after checking every file it lists hashes to its value."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    for name, expected in manifest["sha256"].items():
        if sha256(bundle / name) != expected:
            raise SystemExit(f"{bundle / name} differs from {MANIFEST}: run make gpu-prepare")
    return manifest


def unpack(bundle: Path, into: Path) -> Path:
    """The bundle's files, extracted from its archive into ``into`` and verified."""
    with tarfile.open(bundle / ARCHIVE, "r:xz") as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python without extraction filters: members are checked below
            tar.extractall(into)
    verify(into)
    return into


def onnx_files(bundle: Path) -> tuple[Path, Path]:
    """The int8 ONNX graph and tokenizer of the bundle."""
    (graph,) = sorted((bundle / "onnx-int8").glob("*.onnx"))
    return graph, bundle / "onnx-int8" / "tokenizer.json"


def _shared() -> Path:
    return Path(os.environ.get("MEMSERVE_SHARED", REPO.parent / "shared"))


def prepare(bundle: Path, force: bool = False) -> Path:
    """Fill ``bundle`` from the models cache, the export extra and ../shared/data/ir."""
    from models import prepare_model
    from models.resolve import resolve_tokenizer
    from models.spec import ALL_MINILM_L6_V2_INT8
    from models.torch_export import torch_export

    spec = ALL_MINILM_L6_V2_INT8
    if bundle.exists():
        if not force:
            raise SystemExit(f"{bundle} exists; pass --force to rebuild it")
        shutil.rmtree(bundle)
    staging = Path(tempfile.mkdtemp(prefix="gpu-bundle-"))
    try:
        _fill(staging, spec, torch_export, prepare_model, resolve_tokenizer)
        bundle.mkdir(parents=True)
        with tarfile.open(bundle / ARCHIVE, "w:xz", preset=6) as tar:
            for path in sorted(staging.rglob("*")):
                if path.is_file():
                    tar.add(path, arcname=str(path.relative_to(staging)))
        shutil.copyfile(staging / MANIFEST, bundle / MANIFEST)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = (bundle / ARCHIVE).stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(
            f"{bundle / ARCHIVE} is {size / 2**20:.1f} MiB, over the 64 MiB a call carries"
        )
    print(f"{bundle / ARCHIVE}: {size / 2**20:.1f} MiB")
    return bundle


def _fill(bundle: Path, spec, torch_export, prepare_model, resolve_tokenizer) -> None:
    """The bundle's files and manifest, uncompressed, into ``bundle``."""
    torch_export(spec.name, out=bundle / "torch-fp16")
    prepared = prepare_model(spec)  # the verified int8 copy the CPU encoder runs
    graph = Path(prepared.onnx[0].path)
    (bundle / "onnx-int8").mkdir()
    shutil.copyfile(graph, bundle / "onnx-int8" / graph.name)
    shutil.copyfile(graph.with_suffix(".json"), bundle / "onnx-int8" / f"{graph.stem}.json")
    shutil.copyfile(resolve_tokenizer(spec), bundle / "onnx-int8" / "tokenizer.json")
    ir = _shared() / "data" / "ir"
    for name in IR_SETS:
        target = bundle / "ir" / name
        (target / "qrels").mkdir(parents=True)
        for part in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
            shutil.copyfile(ir / name / part, target / part)
    files = sorted(p for p in bundle.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    manifest = {
        "spec": spec.name,
        "commit": commit,
        "bytes": total,
        "sha256": {str(p.relative_to(bundle)): sha256(p) for p in files},
    }
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(files)} files, {total / 2**20:.1f} MiB before compression, commit {commit[:12]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=BUNDLE)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    prepare(args.out, args.force)


if __name__ == "__main__":
    main()
