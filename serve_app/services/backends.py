"""What the use cases need from the other deployments, as plain callables: Ray handle
calls in the Ingress, in-process objects in unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from serve_app.extraction.trigger import Run, Submit
from serve_app.retrieval.query import SearchQuery
from serve_app.services.health import Probe


class Embed(Protocol):
    """Texts to vectors; ``bulk``: work nobody waits on text by text (document chunks,
    imports) that the Embedder runs in its bulk lane, after interactive callers."""

    async def __call__(
        self, texts: Sequence[str], *, is_query: bool, bulk: bool = False
    ) -> np.ndarray: ...


class Search(Protocol):
    """Queries searched by their ``text`` (embedded as a query, once per distinct text);
    one result list per query, in order."""

    async def __call__(self, queries: Sequence[SearchQuery]) -> list[list[dict[str, Any]]]: ...


class Rerank(Protocol):
    """Candidates re-ordered (serve_app/services/rerank.py's step), best first."""

    async def __call__(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Backends:
    """The other deployments, as plain callables (Ray handles in the Ingress)."""

    embed: Embed
    search: Search
    submit_extraction: Submit | None = None
    run_extraction: Run | None = None  # extract now and answer the outcome (mem0 add)
    probes: Mapping[str, Probe] = field(default_factory=dict)
