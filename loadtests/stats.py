"""The one percentile every benchmark reports (p50, p95, p99, ...).

:func:`percentile` interpolates linearly between the two closest ranks, as numpy's
default (``np.percentile(values, p)``, method "linear", Hyndman & Fan's type 7) and
``statistics.median`` at p=50 do: over the sorted values ``x[0..n-1]`` the p-th
percentile sits at position ``(n - 1) * p / 100``, and between two ranks it is the
weighted mean of their values. p=0 is the minimum, p=100 the maximum. No values: nan
(not 0.0, which would read as a measured latency).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (``p`` in percent, 0-100) of ``values``, linearly
    interpolated between the closest ranks; nan when there are none."""
    if not 0 <= p <= 100:
        raise ValueError(f"p is in percent, 0-100, not {p!r}")
    xs = sorted(float(v) for v in values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * p / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
