"""Installed versions of the packages a result depends on, for the record it is written with.

An export's ``memserve_model.json`` and a benchmark's JSON both say which
library versions produced them, so a later difference can be traced to an upgrade.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version


def package_versions(dists: Iterable[str]) -> dict[str, str]:
    """``{distribution: version}`` for those of ``dists`` that are installed."""
    out = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out
