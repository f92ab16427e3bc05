"""Views of a text pooled from its own run (models.views, Encoder.encode_views): one
encoder run gives the text's vector and its views' (issue 29's CPU cut)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

from models.views import pool_views, view_text, view_weights

MENU = "Suggest a dinner menu for guests on Saturday"
BARE = ((0, 7), (8, 9), (10, 16), (17, 21), (22, 25), (26, 32))  # without "on Saturday"


def test_view_weights_keep_special_tokens_the_prefix_and_overlapping_tokens():
    # "[CLS] q: ab cd [SEP]" with a 3-character prefix "q: " before the text "ab cd"
    offsets = [(0, 0), (0, 2), (3, 5), (6, 8), (0, 0)]
    special = [1, 0, 0, 0, 1]
    w = view_weights(offsets, special, [((3, 5),), ()], shift=3)
    assert w.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [1, 1, 0, 0, 1]]


def test_pool_views_is_the_masked_mean():
    hidden = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    w = np.array([[[1, 1, 1], [1, 0, 1], [0, 1, 0]]], dtype=np.float32)
    out = pool_views(hidden, w)
    assert out.shape == (1, 3, 4)
    np.testing.assert_allclose(out[0, 0], hidden[0].mean(axis=0))
    np.testing.assert_allclose(out[0, 1], (hidden[0, 0] + hidden[0, 2]) / 2)
    np.testing.assert_allclose(out[0, 2], hidden[0, 1])
    with pytest.raises(ValueError):
        pool_views(hidden[0], w)


def test_view_text_joins_the_spans():
    assert view_text(MENU, BARE) == "Suggest a dinner menu for guests"


def test_encode_views_row_zero_is_the_texts_vector_and_views_differ(minilm_encoder):
    texts = [MENU, "Any good bakeries near me?", "hi"]
    views = [[BARE, ((0, len(MENU)),)], [((0, 17),)], []]
    out = minilm_encoder.encode_views(texts, views, is_query=True)
    plain = minilm_encoder.encode(texts, is_query=True)
    assert [a.shape for a in out] == [(3, 384), (2, 384), (1, 384)]
    for i in range(3):
        np.testing.assert_allclose(out[i][0], plain[i], atol=2e-5)
    np.testing.assert_allclose(out[0][2], plain[0], atol=2e-5)  # the whole text: the text
    np.testing.assert_allclose(np.linalg.norm(out[0], axis=1), 1.0, atol=1e-5)
    # without "on Saturday": another vector, nearer the bare text encoded alone
    alone = minilm_encoder.encode([view_text(MENU, BARE)], is_query=True)[0]
    assert float(out[0][1] @ plain[0]) < 0.99
    assert float(out[0][1] @ alone) > float(plain[0] @ alone)


def test_views_are_the_same_whatever_the_batch_holds(minilm_encoder):
    long = "Plan a weekend trip for me, and tell me which museums open on Sunday mornings"
    one = minilm_encoder.encode_views([MENU], [[BARE]], is_query=True)[0]
    two = minilm_encoder.encode_views([long, MENU], [[((0, 26),)], [BARE]], is_query=True)[1]
    np.testing.assert_allclose(one, two, atol=2e-4)  # padding pools nothing


def test_runs_with_fewer_views_than_the_call_fill_their_rows(minilm_encoder):
    long = " ".join(["a long text about tea and coffee and the weather"] * 6)
    texts = [long, MENU, "hi"]
    views = [[((0, 6),), ((7, 11),)], [BARE], [((0, 2),)]]  # the short texts' run: 1 view
    old = minilm_encoder.max_batch_tokens
    minilm_encoder.max_batch_tokens = 64  # the long text runs alone
    try:
        split = minilm_encoder.encode_views(texts, views, is_query=True)
    finally:
        minilm_encoder.max_batch_tokens = old
    one_by_one = [
        minilm_encoder.encode_views([t], [v], is_query=True)[0]
        for t, v in zip(texts, views, strict=True)
    ]
    for got, want in zip(split, one_by_one, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-4)


def test_an_encoder_that_cannot_pool_views_encodes_them_as_texts(minilm_encoder):
    cls = copy.copy(minilm_encoder)
    cls.spec = dataclasses.replace(minilm_encoder.spec, pooling="cls")
    assert minilm_encoder.pools_views and not cls.pools_views
    out = cls.encode_views([MENU, "hello"], [[BARE], []], is_query=True)
    want = cls.encode([MENU, "hello", view_text(MENU, BARE)], is_query=True)
    np.testing.assert_allclose(out[0], want[[0, 2]], atol=2e-5)
    np.testing.assert_allclose(out[1], want[[1]], atol=2e-5)
    with pytest.raises(ValueError):
        cls.encode_views([MENU], [], is_query=True)
