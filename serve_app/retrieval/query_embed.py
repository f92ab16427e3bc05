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
from dataclasses import dataclass
from functools import partial
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


@dataclass
class _Ask:
    texts: list[str]
    model: str | None
    done: asyncio.Future[np.ndarray]


class QueryEmbedder:
    """Query texts to vectors inside a Retriever replica, off its event loop.

    ``encoders`` comes from :func:`models.shared.encoder_set` (the Embedder's factory);
    ``model`` names one by its reference (``ModelFacts.ref``; None: the default), so while
    a model change fills a new table each caller's query is embedded with the model whose
    table it searches. One worker thread: runs go one at a time, as the replica's CPU
    allows, while its event loop keeps answering from the cache and the database.

    Runs coalesce greedily, without a fill wait: a caller that finds the worker idle runs
    at once (one client pays nothing); callers arriving while a run computes queue, and
    the next run takes all of them (same model, up to ``max_batch`` texts). On this
    2-core box a run of 8 short queries costs ~2.2 ms of CPU per query against ~3.2 ms
    run one by one (ONNX Runtime's per-run overhead shared), so a loaded replica spends
    less per search exactly when it is short of CPU. ``max_batch`` 1: one run per text.
    """

    def __init__(self, encoders: EncoderSet, max_batch: int = 16) -> None:
        self.encoders = encoders
        self.max_batch = max(1, int(max_batch))
        self.runs = 0  # encoder runs so far (tests, stats)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-embed")
        self._queue: list[_Ask] = []
        self._worker: asyncio.Task | None = None

    async def embed(self, texts: Sequence[str], model: str | None = None) -> np.ndarray:
        """``(len(texts), dim)`` float32 query vectors of ``model``."""
        if model not in self.encoders:  # first use of a model (a switch): load off the loop
            encoder = await asyncio.to_thread(self.encoders.get, model)
            await asyncio.to_thread(encoder.warmup)
        ask = _Ask(list(texts), model, asyncio.get_running_loop().create_future())
        self._queue.append(ask)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._drain())
        return await ask.done

    def _next_run(self) -> list[_Ask]:
        """The queue's head and every later ask of its model that fits in ``max_batch``."""
        head = self._queue[0]
        run, rest, size = [], [], 0
        for ask in self._queue:
            fits = not run or size + len(ask.texts) <= self.max_batch
            if ask.model == head.model and fits and not ask.done.done():
                run.append(ask)
                size += len(ask.texts)
            elif not ask.done.done():  # a cancelled caller's ask is dropped
                rest.append(ask)
        self._queue = rest
        return run

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            run = self._next_run()
            if not run:
                continue
            texts = list(dict.fromkeys(t for ask in run for t in ask.texts))
            encoder = self.encoders.get(run[0].model)
            try:
                vectors = await loop.run_in_executor(
                    self._pool, partial(encoder.encode, texts, is_query=True)
                )
            except Exception as exc:  # every caller of the run hears of it
                for ask in run:
                    if not ask.done.done():
                        ask.done.set_exception(exc)
                continue
            self.runs += 1
            row = {text: i for i, text in enumerate(texts)}
            for ask in run:
                if not ask.done.done():
                    ask.done.set_result(vectors[[row[t] for t in ask.texts]])

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        self._pool.shutdown(wait=False)
