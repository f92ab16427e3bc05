"""Length-sorted, token-capped batch plans."""

from __future__ import annotations

import random

import pytest

from models.batching import padded_tokens, plan_batches


def test_every_index_once_and_sorted_by_length() -> None:
    rng = random.Random(7)
    lengths = [rng.randint(1, 300) for _ in range(200)]
    plan = plan_batches(lengths, max_batch_tokens=2048, max_batch_size=32)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(200))
    assert [lengths[i] for i in flat] == sorted(lengths)


def test_caps_tokens_and_rows() -> None:
    rng = random.Random(3)
    lengths = [rng.randint(1, 256) for _ in range(300)]
    plan = plan_batches(lengths, max_batch_tokens=1024, max_batch_size=16)
    for batch in plan:
        assert len(batch) <= 16
        assert len(batch) * max(lengths[i] for i in batch) <= 1024


def test_short_texts_not_padded_to_long_ones() -> None:
    lengths = [12] * 31 + [256]
    plan = plan_batches(lengths, max_batch_tokens=2048)
    assert plan[-1] == [31]  # the long text runs alone
    naive = len(lengths) * max(lengths)
    assert padded_tokens(lengths, plan) < naive / 3


def test_single_text_over_cap_gets_own_batch() -> None:
    assert plan_batches([5000, 3], max_batch_tokens=100) == [[1], [0]]


def test_empty_and_bad_args() -> None:
    assert plan_batches([], max_batch_tokens=10) == []
    with pytest.raises(ValueError):
        plan_batches([1], max_batch_tokens=0)
    with pytest.raises(ValueError):
        plan_batches([1], max_batch_tokens=10, max_batch_size=0)


def test_spread_batches_balances_runs_for_workers() -> None:
    from models.batching import spread_batches

    short = [20] * 32
    # One run of 8 short texts (160 tokens): halved once, one half per worker; runs under
    # 128 tokens are not split further.
    assert spread_batches([list(range(8))], short, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # 23 + 9 rows of 20 tokens: halved until no run exceeds half a worker's share (160).
    plan = spread_batches([list(range(23)), list(range(23, 32))], short, 2)
    assert sorted(len(b) for b in plan) == [4, 5, 5, 6, 6, 6]
    assert sorted(i for b in plan for i in b) == list(range(32))
    # Long texts are split down to single rows; single rows never are.
    assert spread_batches([[0, 1], [2, 3]], [200] * 4, 2) == [[0], [1], [2], [3]]
    assert spread_batches([[0], [1]], [5, 5], 8) == [[0], [1]]
    # A run under min_split_tokens stays whole even with idle workers (3 x 20 tokens).
    assert spread_batches([[0, 1, 2]], short, 2) == [[0, 1, 2]]
    assert spread_batches([[0, 1, 2]], short, 2, min_split_tokens=32) == [[0], [1], [2]]
    assert spread_batches([[0, 1]], [5, 5], 1) == [[0, 1]]
    assert spread_batches([], [], 4) == []
