"""ONNX graph rewrites without torch: cast folding, transformer fusions, int8 and fp16.

Shared by the export CLI (:mod:`models.export`) and the first-start
re-quantisation of a shipped model (:mod:`models.requantize`). Needs only
``onnxruntime`` and ``onnx``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path


class ExportError(RuntimeError):
    """The export could not be done or did not pass its checks."""


def fold_constants(source: Path, out: Path) -> None:
    """ONNX Runtime's basic graph optimisation, saved: constant subgraphs folded.

    A graph that stores int8 weights but casts and scales them to float at
    run time (``Cast`` + ``Mul`` on initializers) comes out with plain fp32
    weights, which :func:`quantize_int8` can then quantize for integer
    kernels. Only provider-independent rewrites run, so the saved graph
    stays portable.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
    if not out.is_file():
        raise ExportError(f"ONNX Runtime wrote no optimised graph for {source}")


def optimize_graph(
    fp32: Path, out: Path, config: Path, *, full: bool = False, gelu_approximation: bool = True
) -> dict[str, int]:
    """ONNX Runtime transformer optimizer on an fp32 encoder graph; returns fused op counts.

    ``full=False`` only fuses GELU (as ``FastGelu`` with ``gelu_approximation``,
    else ``Gelu``/``BiasGelu``); ``full=True`` also fuses attention and the
    layer norms. Heads and width come from the checkpoint's ``config.json``;
    BERT-like encoders (BERT, MiniLM, BGE, RoBERTa) use the ``bert`` rules.
    """
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        cfg = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError):
        cfg = {}
    heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
    if not heads or not hidden:
        raise ExportError(f"{config} lacks num_attention_heads/hidden_size")
    options = FusionOptions("bert")
    options.enable_gelu_approximation = gelu_approximation
    if not full:
        options.enable_attention = False
        options.enable_embed_layer_norm = False
        options.enable_skip_layer_norm = False
        options.enable_bias_skip_layer_norm = False
    model = optimize_model(
        str(fp32),
        model_type="bert",
        num_heads=int(heads),
        hidden_size=int(hidden),
        optimization_options=options,
        opt_level=0,  # graph rewrites only; ORT applies its own fusions at session start
        use_gpu=False,
    )
    fused = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
    if full and not fused.get("Attention"):
        raise ExportError(f"no attention fused in {fp32.name} ({fused}); export without --optimize")
    model.save_model_to_file(str(out))
    return fused


def quantize_int8(
    fp32: Path,
    out: Path,
    *,
    per_channel: bool = True,
    reduce_range: bool = False,
    exclude_nodes: str | None = None,
) -> list[str]:
    """Dynamic int8: weights of MatMul and embedding Gather to int8, activations at run time.

    Per-channel scales keep the small MiniLM/BGE projections accurate
    (per-tensor loses ~5% cosine on MiniLM); ``reduce_range`` only helps on
    CPUs without VNNI. ``exclude_nodes`` (a regex on node names) keeps
    matching MatMuls in fp32, e.g. ``intermediate/dense`` (the FFN input
    projection, whose LayerNorm input has outlier channels) trades ~20% speed
    for closer agreement with fp32 and less dependence on batch composition.
    Returns the excluded node names.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(fp32), load_external_data=False).graph
    excluded: list[str] = []
    if exclude_nodes:
        pattern = re.compile(exclude_nodes)
        excluded = [n.name for n in graph.node if pattern.search(n.name)]
        if not excluded:
            raise ExportError(f"--exclude-nodes {exclude_nodes!r} matches no node")
    # A fused graph (optimize_graph) has contrib ops with int8 forms of their own.
    op_types = ["MatMul", "Gather", "Attention", "EmbedLayerNormalization"]
    with _quiet_root_logger():
        quantize_dynamic(
            str(fp32),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=reduce_range,
            op_types_to_quantize=[t for t in op_types if any(n.op_type == t for n in graph.node)],
            nodes_to_exclude=excluded,
            # contrib-op outputs have no inferred type; they are all float here
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return excluded


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantizer logs a line per tensor on the root logger (at INFO, which
    `make run` shows): keep it to warnings while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


def convert_fp16(fp32: Path, out: Path) -> None:
    """fp16 weights and arithmetic for the CUDA provider (inputs/outputs stay int64/fp32)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(fp32))
    onnx.save(convert_float_to_float16(model, keep_io_types=True), str(out))


def fuse_gelu(source: Path, out: Path) -> int:
    """Erf GELU subgraphs (``x * 0.5 * (1 + erf(x / sqrt 2))``) as one exact ``Gelu`` op each.

    Same function, one kernel instead of five elementwise passes (~8% of a
    MiniLM int8 run on CPU); ONNX Runtime does not fuse the exported form
    itself. Returns how many were fused.
    """
    import onnx
    from onnxruntime.transformers.fusion_gelu import FusionGelu
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = OnnxModel(onnx.load(str(source)))
    FusionGelu(model).apply()
    model.remove_unused_constant()
    model.topological_sort()
    onnx.save(model.model, str(out))
    return sum(1 for n in model.model.graph.node if n.op_type == "Gelu")
