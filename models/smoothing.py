"""SmoothQuant for dynamic int8: move activation outliers of chosen MatMuls into their weights.

Dynamic int8 quantises a MatMul's input with one scale per tensor. In BERT-like
encoders the LayerNorm output that feeds each feed-forward up-projection has a
few channels ~50x larger than the rest, so that one scale leaves the other
channels a handful of levels: the vectors drift (MiniLM: mean cosine 0.992 to
fp32) and depend on the batch a text runs in. Dividing input channel ``j`` by
``s_j = max|x_j|^alpha / max|W_j|^(1-alpha)`` (an inserted ``Mul``) and
multiplying weight row ``j`` by ``s_j`` computes the same product in fp32 but
spreads the range over the weights, which are quantised per channel
(Xiao et al., 2022, https://arxiv.org/abs/2211.10438). The LayerNorm output
also feeds the residual, so the scale cannot be folded into the LayerNorm.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

#: Role of a weight MatMul in a transformer layer, found from its shape and input.
Role = Literal["qkv", "attn_out", "ffn_up", "ffn_down"]

#: Texts whose activations set the smoothing scales: chat-like, short and long.
#: Not the agreement check set (models.agreement), so the check stays a fair one.
CALIBRATION_TEXTS: tuple[str, ...] = (
    "Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's great! I've been painting a lot lately, mostly landscapes.",
    "The user runs three times a week and is training for a half marathon in May.",
    "My partner and I are vegetarian, but our son eats fish.",
    "Set up a reminder for the quarterly tax payment on the 15th.",
    "Where did I say I wanted to travel this summer?",
    "what's my sister's name",
    "I switched from VS Code to Neovim last year and never looked back.",
    "Our team uses Kubernetes on GCP; staging mirrors production at half the size.",
    "He was born in 1987 in Porto and moved to Lyon for university.",
    "yes",
    "Can you summarise what we discussed about the kitchen renovation?",
    "The flight LH 1234 leaves Frankfurt at 07:45 and lands in Oslo at 10:05.",
    (
        "During the last review the user explained that their startup pivoted from "
        "selling analytics dashboards to small retailers towards an API for inventory "
        "forecasting, that they hired two data engineers, and that the next funding "
        "round depends on signing at least five enterprise customers by the end of Q3."
    ),
    "Ich wohne seit zwei Jahren in München und arbeite als Ärztin.",
    "Allergic to penicillin — tell every new doctor.",
)


def calibration_feeds(tokenizer: Path, max_tokens: int) -> Iterator[dict[str, np.ndarray]]:
    """One graph input per calibration text (no padding to skew the maxima)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.enable_truncation(max_length=max_tokens)
    for text in CALIBRATION_TEXTS:
        ids = np.array([tok.encode(text).ids], dtype=np.int64)
        yield {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }


def smooth_ffn_up(
    source: Path, out: Path, tokenizer: Path, max_tokens: int, *, alpha: float = 0.7
) -> list[str]:
    """Write ``source`` with every FFN up-projection smoothed; returns their names.

    Writes nothing and returns ``[]`` when the graph has no recognisable
    up-projection (the caller then quantises ``source`` as it is).
    """
    import onnx

    roles = matmul_roles(onnx.load(str(source), load_external_data=False))
    nodes = nodes_by_role(roles, "ffn_up")
    if nodes:
        smooth_matmuls(source, out, nodes, calibration_feeds(tokenizer, max_tokens), alpha=alpha)
    return nodes


def matmul_roles(model: Any) -> dict[str, Role]:
    """Role of each MatMul with a constant weight, in graph order (one layer after another).

    Widening weights are FFN up-projections, narrowing ones down-projections;
    square ones fed by a Reshape (heads merged back) are attention outputs,
    the others Q/K/V projections.
    """
    graph = model.graph
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    roles: dict[str, Role] = {}
    for node in graph.node:
        if node.op_type != "MatMul" or len(shapes.get(node.input[1], ())) != 2:
            continue
        rows, cols = shapes[node.input[1]]
        source = producer.get(node.input[0])
        if cols > rows:
            roles[node.name] = "ffn_up"
        elif rows > cols:
            roles[node.name] = "ffn_down"
        elif source is not None and source.op_type == "Reshape":
            roles[node.name] = "attn_out"
        else:
            roles[node.name] = "qkv"
    return roles


def nodes_by_role(
    roles: dict[str, Role], role: Role, layers: Iterable[int] | None = None
) -> list[str]:
    """Names of the MatMuls of one role, in layer order; only ``layers`` when given."""
    names = [name for name, r in roles.items() if r == role]
    if layers is None:
        return names
    return [names[i] for i in layers]


def tensor_values(
    source: Path, tensors: Sequence[str], feeds: Iterable[dict[str, np.ndarray]]
) -> Iterator[list[np.ndarray]]:
    """The values of ``tensors`` (intermediate ones too) in each run of ``source`` on ``feeds``."""
    import onnx
    import onnxruntime as ort

    probe = onnx.load(str(source))
    for name in tensors:
        probe.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    inputs = {i.name for i in session.get_inputs()}
    for feed in feeds:
        yield session.run(list(tensors), {k: v for k, v in feed.items() if k in inputs})


def input_maxima(
    source: Path, tensors: Sequence[str], feeds: Iterable[dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Per-channel max |value| of ``tensors`` (last axis) over runs of the graph on ``feeds``."""
    maxima: dict[str, np.ndarray] = {}
    for values in tensor_values(source, tensors, feeds):
        for name, value in zip(tensors, values, strict=True):
            peak = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            maxima[name] = np.maximum(maxima[name], peak) if name in maxima else peak
    return maxima


def smooth_matmuls(
    source: Path,
    out: Path,
    nodes: Sequence[str],
    feeds: Iterable[dict[str, np.ndarray]],
    *,
    alpha: float = 0.7,
) -> None:
    """Write ``source`` with each MatMul in ``nodes`` smoothed (same fp32 function)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    targets = [n for n in graph.node if n.name in set(nodes)]
    if len(targets) != len(set(nodes)):
        raise ValueError(f"not all of {list(nodes)} are nodes of {source}")
    maxima = input_maxima(source, sorted({n.input[0] for n in targets}), feeds)
    weights = {i.name: i for i in graph.initializer}
    uses = [name for n in graph.node for name in n.input]
    for node in targets:
        if uses.count(node.input[1]) != 1:  # scaling a shared weight would change its other uses
            raise ValueError(f"weight {node.input[1]} of {node.name} is shared; cannot smooth")
        weight = numpy_helper.to_array(weights[node.input[1]])
        w_peak = np.maximum(np.abs(weight).max(axis=1), 1e-5)
        x_peak = np.maximum(maxima[node.input[0]], 1e-5)
        scale = np.clip(x_peak**alpha / w_peak ** (1 - alpha), 1e-2, 1e3).astype(np.float32)
        weights[node.input[1]].CopyFrom(
            numpy_helper.from_array((weight * scale[:, None]).astype(np.float32), node.input[1])
        )
        inverse, smoothed = f"{node.name}_smooth_scale", f"{node.name}_smoothed_input"
        graph.initializer.append(numpy_helper.from_array(1.0 / scale, inverse))
        mul = onnx.helper.make_node(
            "Mul", [node.input[0], inverse], [smoothed], name=f"{node.name}_smooth"
        )
        node.input[0] = smoothed
        graph.node.insert(list(graph.node).index(node), mul)
    onnx.save(model, str(out))
