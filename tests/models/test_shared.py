"""models.shared: the one factory replicas load encoders through (issue 23)."""

from __future__ import annotations

import pytest

from models.shared import EncoderOptions, encoder_set, shared_encoder
from tests.models.conftest import SHIPPED_MINILM

CPU1 = EncoderOptions(device="cpu", threads=1)


def test_one_object_per_model_and_options() -> None:
    first = shared_encoder(SHIPPED_MINILM, CPU1)
    assert shared_encoder(SHIPPED_MINILM, EncoderOptions(device="cpu", threads=1)) is first
    other = shared_encoder(SHIPPED_MINILM, EncoderOptions(device="cpu", threads=2))
    assert other is not first and other.parallel == 2


def test_encoder_sets_of_two_code_paths_share_the_model_object() -> None:
    embedder_side = encoder_set([SHIPPED_MINILM], CPU1)
    retriever_side = encoder_set([SHIPPED_MINILM], CPU1)
    assert retriever_side.default is embedder_side.default  # not a copy
    assert retriever_side.get(SHIPPED_MINILM) is embedder_side.default
    with pytest.raises(ValueError):
        encoder_set([], CPU1)
