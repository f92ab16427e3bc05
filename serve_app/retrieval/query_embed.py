"""Searching by query text: each distinct text embedded once, then every query searched.

Two routes share :func:`search_texts` (``MEMSERVE_QUERY_EMBED``, issue 23): by default
the Retriever replica embeds the text itself (:class:`QueryEmbedder`: the Ingress makes
one Serve call per search); with ``embedder`` the Ingress asks the Embedder for the
vector (batched with other callers, e.g. on a GPU) and then the Retriever per query.
A context's two searches (broad and session) share one text, so one embedding.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from models.encoder_set import EncoderSet
from serve_app.retrieval.query import SearchQuery

EmbedQueries = Callable[[list[str]], Awaitable[np.ndarray]]
SearchVector = Callable[[SearchQuery, np.ndarray], Awaitable[list[dict[str, Any]]]]


async def search_texts(
    queries: Sequence[SearchQuery], embed: EmbedQueries, search: SearchVector
) -> list[list[dict[str, Any]]]:
    """Each query's ``text`` embedded (as a query; once per distinct text), then searched;
    the results in the queries' order."""
    if not queries:
        return []
    texts = list(dict.fromkeys(q.text for q in queries))
    vectors = np.asarray(await embed(texts), dtype=np.float32)
    row = {text: i for i, text in enumerate(texts)}
    return list(await asyncio.gather(*(search(q, vectors[row[q.text]]) for q in queries)))


class QueryEmbedder:
    """Query texts to vectors inside a Retriever replica, off its event loop.

    ``encoders`` comes from :func:`models.shared.encoder_set` (the Embedder's factory);
    ``model`` names one by its reference (``ModelFacts.ref``; None: the default), so while
    a model change fills a new table each caller's query is embedded with the model whose
    table it searches. One worker thread: queries run one at a time, as the replica's CPU
    allows, while its event loop keeps answering from the cache and the database.
    """

    def __init__(self, encoders: EncoderSet) -> None:
        self.encoders = encoders
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-embed")

    async def embed(self, texts: Sequence[str], model: str | None = None) -> np.ndarray:
        """``(len(texts), dim)`` float32 query vectors of ``model``."""
        if model not in self.encoders:  # first use of a model (a switch): load off the loop
            encoder = await asyncio.to_thread(self.encoders.get, model)
            await asyncio.to_thread(encoder.warmup)
        encoder = self.encoders.get(model)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: encoder.encode(list(texts), is_query=True)
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False)
