"""The bge-small-zh-v1.5 spec (512-d, CLS, Chinese query instruction) on a stand-in graph,
and one EncoderSet serving it beside the default model (a model change in progress).

The BGE-zh weights are not on this machine: MiniLM's graph with a fixed projection to
512 wide token states (tests/models/standin.py) runs under the spec, so the spec's
pipeline is what is tested, not BGE's vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

from models import get_spec, load_encoder
from models.encoder import l2_normalize
from models.encoder_set import EncoderSet
from models.spec import BGE_SMALL_ZH_V15, BGE_ZH_QUERY_PREFIX
from tests.models.conftest import SHIPPED_MINILM
from tests.models.standin import standin_model_dir


@pytest.fixture(scope="module")
def zh_dir(tmp_path_factory):
    return standin_model_dir(tmp_path_factory.mktemp("bge-zh"))


@pytest.fixture(scope="module")
def zh(zh_dir):
    return load_encoder(zh_dir, device="cpu", threads=1)


def test_builtin_spec() -> None:
    spec = get_spec("bge-small-zh-v1.5")
    assert (spec.dim, spec.pooling, spec.max_tokens, spec.normalize) == (512, "cls", 512, True)
    assert spec.query_prefix == BGE_ZH_QUERY_PREFIX and spec.table_slug == "bge_small_zh_v1_5"
    assert spec.table_slug != get_spec("bge-small-en-v1.5").table_slug


def test_model_dir_loads_as_the_builtin(zh_dir, zh) -> None:
    """A directory with a spec file of that name must agree with the built-in semantics."""
    assert get_spec(zh_dir).table_slug == BGE_SMALL_ZH_V15.table_slug
    assert zh.spec.dim == 512 and zh.spec.pooling == "cls"


def test_cls_pooling_and_512_dims(zh) -> None:
    text = "我喜欢在周末爬山 and hiking"
    vector = zh.encode([text])[0]
    assert vector.shape == (512,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    ids = np.array([zh._tokenizer.encode(text).ids], dtype=np.int64)
    (hidden,) = zh._session.run(
        ["last_hidden_state"],
        {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids},
    )
    np.testing.assert_allclose(vector, l2_normalize(hidden[:, 0, :])[0], atol=1e-5)
    assert not np.allclose(vector, l2_normalize(hidden.mean(axis=1))[0], atol=1e-3)


def test_query_instruction_on_queries_only(zh) -> None:
    text = "我对什么过敏"
    query = zh.encode([text], is_query=True)[0]
    np.testing.assert_allclose(query, zh.encode([BGE_ZH_QUERY_PREFIX + text])[0], atol=1e-5)
    assert float(zh.encode([text])[0] @ query) < 0.999


def test_encoder_set_serves_two_models_side_by_side(zh_dir, zh) -> None:
    minilm = load_encoder(SHIPPED_MINILM, device="cpu", threads=1)
    loaded: list[str] = []

    def loader(ref: str):
        loaded.append(ref)
        return zh

    encoders = EncoderSet(minilm, loader, "all-minilm-l6-v2-int8")
    texts = ["a cat", "un chat", "一只猫"]
    rows = encoders.encode_mixed(texts, [False, True, False], [None, str(zh_dir), str(zh_dir)])
    assert [r.shape for r in rows] == [(384,), (512,), (512,)]
    np.testing.assert_allclose(rows[0], minilm.encode(["a cat"])[0], atol=2e-4)
    np.testing.assert_allclose(rows[1], zh.encode(["un chat"], is_query=True)[0], atol=2e-4)
    one_model = encoders.encode_mixed(texts, [False] * 3, [str(zh_dir)] * 3)
    assert one_model.shape == (3, 512)
    assert loaded == [str(zh_dir)]  # loaded once, on first use
    assert "bge-small-zh-v1.5" in encoders and len(encoders.loaded()) == 2
