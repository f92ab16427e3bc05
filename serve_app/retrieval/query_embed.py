"""Searching by query text: each distinct text embedded once, then every query searched.

Two routes share :func:`search_texts` (``MEMSERVE_QUERY_EMBED``): by default
the Retriever replica embeds the text itself (:class:`QueryEmbedder`: the Ingress makes
one Serve call per search); with ``embedder`` the Ingress asks the Embedder for the
vector (batched with other callers, e.g. on a GPU) and then the Retriever per query.
A context's two searches (broad and session) share one text, so one embedding; a
query that is a view of another text (``SearchQuery.view_of``: a part of the message,
the message without its time words) is pooled from that text's run where the route
can (``embed_views``), else its own ``text`` is embedded.
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
from models.views import Spans
from serve_app.retrieval.query import SearchQuery

EmbedQueries = Callable[[list[str]], Awaitable[np.ndarray]]
# (texts, each text's views) -> per text (1 + its views, dim): Encoder.encode_views.
EmbedViews = Callable[[list[str], list[list[Spans]]], Awaitable[list[np.ndarray]]]
SearchVector = Callable[[SearchQuery, np.ndarray], Awaitable[list[dict[str, Any]]]]


async def search_texts(
    queries: Sequence[SearchQuery],
    embed: EmbedQueries,
    search: SearchVector,
    embed_views: EmbedViews | None = None,
) -> list[list[dict[str, Any]]]:
    """Each query's ``text`` embedded (as a query; once per distinct text), then searched;
    the results in the queries' order. With ``embed_views``, a query with ``view_of``
    gets its view of that text's run (one run per distinct text, however many views)."""
    if not queries:
        return []
    if embed_views is None or not any(_viewed(q) for q in queries):
        texts = list(dict.fromkeys(q.text for q in queries))
        vectors = np.asarray(await embed(texts), dtype=np.float32)
        row = {text: i for i, text in enumerate(texts)}
        return list(await asyncio.gather(*(search(q, vectors[row[q.text]]) for q in queries)))
    views: dict[str, dict[Spans, int]] = {}  # source text -> its views -> row (1, 2, ...)
    for q in queries:
        mine = views.setdefault(str(q.view_of) if _viewed(q) else q.text, {})
        if _viewed(q) and q.view_spans not in mine:
            mine[q.view_spans] = len(mine) + 1
    arrays = await embed_views(list(views), [list(v) for v in views.values()])
    at = dict(zip(views, arrays, strict=True))

    def vector(q: SearchQuery) -> np.ndarray:
        if not _viewed(q):
            return np.asarray(at[q.text][0], dtype=np.float32)
        source = str(q.view_of)
        return np.asarray(at[source][views[source][q.view_spans]], dtype=np.float32)

    return list(await asyncio.gather(*(search(q, vector(q)) for q in queries)))


def _viewed(q: SearchQuery) -> bool:
    """A view of another text's run (a view with no ranges pools nothing: its text)."""
    return q.view_of is not None and bool(q.view_spans)


@dataclass
class _Ask:
    texts: list[str]
    model: str | None
    done: asyncio.Future[Any]
    views: list[list[Spans]] | None = None  # per text (embed_views); None: vectors only


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
        return await self._ask(_Ask(list(texts), model, self._future()))

    async def embed_views(
        self, texts: Sequence[str], views: Sequence[Sequence[Spans]], model: str | None = None
    ) -> list[np.ndarray]:
        """Per text a (1 + its views, dim) array (:meth:`models.encoder.Encoder.
        encode_views`), in the same coalesced runs as :meth:`embed`."""
        if model not in self.encoders:
            await self.embed([], model)  # loads it off the loop
        ask = _Ask(list(texts), model, self._future(), [list(v) for v in views])
        return await self._ask(ask)

    @staticmethod
    def _future() -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _ask(self, ask: _Ask) -> Any:
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
            # each text once, with the union of the views its askers want
            views: dict[str, dict[Spans, int]] = {}
            for ask in run:
                for i, t in enumerate(ask.texts):
                    mine = views.setdefault(t, {})
                    for sp in ask.views[i] if ask.views is not None else ():
                        mine.setdefault(sp, len(mine) + 1)
            texts = list(views)
            encoder = self.encoders.get(run[0].model)
            pooled = any(ask.views is not None for ask in run)
            call = (
                partial(encoder.encode_views, texts, [list(v) for v in views.values()])
                if pooled
                else partial(encoder.encode, texts)
            )
            try:
                result = await loop.run_in_executor(self._pool, partial(call, is_query=True))
            except Exception as exc:  # every caller of the run hears of it
                for ask in run:
                    if not ask.done.done():
                        ask.done.set_exception(exc)
                continue
            self.runs += 1
            row = {text: i for i, text in enumerate(texts)}
            for ask in run:
                if ask.done.done():
                    continue
                if not pooled:
                    ask.done.set_result(result[[row[t] for t in ask.texts]])
                elif ask.views is None:
                    rows = [result[row[t]][0] for t in ask.texts]
                    ask.done.set_result(np.stack(rows) if rows else np.zeros((0, encoder.dim)))
                else:
                    ask.done.set_result(
                        [
                            result[row[t]][[0, *(views[t][sp] for sp in ask.views[i])]]
                            for i, t in enumerate(ask.texts)
                        ]
                    )

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        self._pool.shutdown(wait=False)
