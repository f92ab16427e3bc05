"""loadtests/stats.py: the one percentile the benchmarks report."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from loadtests.stats import percentile


def test_it_is_numpys_default_linear_interpolation() -> None:
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 101):
        xs = [rng.uniform(0, 100) for _ in range(n)]
        for p in (0, 1, 37.5, 50, 95, 99, 100):
            assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), abs=1e-12)
        assert percentile(xs, 50) == pytest.approx(statistics.median(xs), abs=1e-12)


def test_between_two_ranks_and_at_the_ends() -> None:
    xs = [40.0, 10.0, 30.0, 20.0]  # order does not matter
    assert percentile(xs, 0) == 10.0 and percentile(xs, 100) == 40.0
    assert percentile(xs, 50) == 25.0
    assert percentile(xs, 95) == pytest.approx(38.5)  # position 2.85
    assert percentile(iter(xs), 50) == 25.0  # any iterable


def test_no_values_is_nan_and_p_is_in_percent() -> None:
    assert math.isnan(percentile([], 95))
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    with pytest.raises(ValueError):
        percentile([1.0], -0.5)
