"""A model change with query embedding in the Retriever (issue 23): while two models are
active (the old one serving, the new one filling), each query is embedded with the
model whose table it searches, by name, in one replica."""

from __future__ import annotations

import numpy as np

from models.encoder_set import EncoderSet
from serve_app.retrieval.query_embed import QueryEmbedder

TEXTS = ["what colour is my car?", "ok"]


async def test_each_query_is_embedded_with_the_model_it_names(encoder_a, encoder_b) -> None:
    loaded: list[str] = []

    def load(ref: str):
        loaded.append(ref)
        return {"b-ref": encoder_b}[ref]

    queries = QueryEmbedder(EncoderSet(encoder_a, load, "a-ref"))
    try:
        old = await queries.embed(TEXTS, "a-ref")
        new = await queries.embed(TEXTS, "b-ref")  # the filling model, loaded on first use
        default = await queries.embed(TEXTS)
        again = await queries.embed(TEXTS, "b-ref")
    finally:
        queries.close()
    assert old.shape == (2, 384) and new.shape == (2, 512)
    np.testing.assert_allclose(old, encoder_a.encode(TEXTS, is_query=True), atol=1e-6)
    np.testing.assert_allclose(new, encoder_b.encode(TEXTS, is_query=True), atol=1e-6)
    np.testing.assert_allclose(default, old, atol=1e-6)  # None: the replica's default
    np.testing.assert_allclose(again, new, atol=1e-6)
    assert loaded == ["b-ref"]  # loaded once, then kept beside the old one
