"""SmoothQuant rewrite: same fp32 function, flatter activations for dynamic int8."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from models.agreement import check_vectors, cosines, file_encoder
from models.quantize import fold_constants
from models.requantize import _calibration_feeds
from models.resolve import default_models_dir, resolve_onnx
from models.smoothing import input_maxima, matmul_roles, nodes_by_role, smooth_matmuls
from tests.models.conftest import SHIPPED_MINILM


@pytest.fixture(scope="module")
def folded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smoothing") / "folded.onnx"
    fold_constants(resolve_onnx(SHIPPED_MINILM), out)
    return out


def test_roles_of_a_six_layer_encoder(folded: Path) -> None:
    roles = matmul_roles(onnx.load(str(folded)))
    assert Counter(roles.values()) == {"qkv": 18, "attn_out": 6, "ffn_up": 6, "ffn_down": 6}
    ups = nodes_by_role(roles, "ffn_up")
    assert nodes_by_role(roles, "ffn_up", [0, 5]) == [ups[0], ups[5]]


def test_smoothing_keeps_the_fp32_function_and_flattens_the_input(
    folded: Path, tmp_path: Path
) -> None:
    ups = nodes_by_role(matmul_roles(onnx.load(str(folded))), "ffn_up")
    feeds = list(_calibration_feeds(SHIPPED_MINILM, default_models_dir()))
    out = tmp_path / "smoothed.onnx"
    smooth_matmuls(folded, out, ups, feeds, alpha=0.7)
    # Same vectors in fp32: the scale moved from the activations into the weights.
    before = check_vectors(file_encoder(SHIPPED_MINILM, folded))
    after = check_vectors(file_encoder(SHIPPED_MINILM, out))
    assert cosines(before, after).min() > 0.99999
    # The outlier channels that set a per-tensor int8 scale are tamed.
    graph = onnx.load(str(out)).graph
    smoothed_in = [n.input[0] for n in graph.node if n.name == ups[0]]
    raw_in = [n.input[0] for n in graph.node if n.name == f"{ups[0]}_smooth"]
    peaks = input_maxima(out, raw_in + smoothed_in, feeds)
    raw, flat = peaks[raw_in[0]], peaks[smoothed_in[0]]
    assert raw.max() / np.median(raw) > 2 * flat.max() / np.median(flat)
    with pytest.raises(ValueError, match="not all"):
        smooth_matmuls(folded, tmp_path / "x.onnx", ["no_such_node"], feeds)
