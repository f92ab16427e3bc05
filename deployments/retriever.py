"""Retriever deployment: hot FAISS cache + pgvector, routed by shard with Serve multiplexing.

The ingress calls ``retriever.options(multiplexed_model_id=shard).search.remote(...)``
(``serve_app.retrieval.shards``); Serve then prefers the replica that already "loaded"
the shard, so a user's cache entries stay warm on one replica. When Serve unloads a
shard (LRU over ``retrieval_shards_per_replica``) its users' entries are dropped.
Freshness across replicas: version check per search, plus LISTEN invalidation.

A model change (serve_app/reembed): a search names the table its query vector belongs
to (``model``); the replica follows the registry (:class:`ModelView`) and, when the new
model's table becomes active, builds a fresh core over it (an empty hot cache that
loads the new vectors) in place of the old one. A search still embedded with the old
model (a caller that has not switched yet) is answered from the old table, uncached.

Query embedding: ``search_text`` takes the query text and embeds it here, with
the Embedder's verified model loaded through the same factory
(:func:`deployments.encoders.replica_encoders`), so a search is one Serve call. Every
model the registry serves is loaded at start (a model change: the active and the filling
one), and a search names the model (``ref``) whose table (``model``) it reads. With
``MEMSERVE_QUERY_EMBED=embedder`` nothing is loaded and the Ingress calls ``search``
with the Embedder's vector.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import numpy as np
from ray import serve

from deployments.encoders import replica_encoders
from models.encoder_set import EncoderSet
from models.views import Spans
from serve_app.db.pool import open_pool
from serve_app.db.resolve import resolve_dsn
from serve_app.embedding_model import ModelFacts
from serve_app.metrics import Flusher, start_pool_metrics
from serve_app.reembed.view import ModelView
from serve_app.retrieval.listener import ChangeListener
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.query_embed import QueryEmbedder, search_texts
from serve_app.retrieval.retriever import Retriever as RetrieverCore
from serve_app.retrieval.shards import shard_of
from serve_app.settings import get_settings

log = logging.getLogger("ray.serve")


class Shard:
    """What Serve multiplexes: a shard id; unloading it drops its users from the cache."""

    def __init__(self, shard_id: str, replica: Retriever) -> None:
        self.shard_id = shard_id
        self.replica = replica

    async def __del__(self) -> None:
        core = self.replica.core
        shards = core.r.retrieval_shards
        core.cache.drop_where(lambda key: shard_of(key[0], key[1], shards) == self.shard_id)


@serve.deployment
class Retriever:
    async def __init__(self, model: ModelFacts) -> None:
        settings = get_settings()
        dsn = resolve_dsn(settings)  # launcher's DSN, else the embedded server (`serve run`)
        self.settings = settings
        self.pool = await open_pool(dsn, settings)
        self.pool_metrics = start_pool_metrics(
            self.pool, "retriever", settings.db.metrics_interval_s
        )
        self.slug = model.table_slug
        self.queries = (  # query embedding here, every model the registry serves (None: off)
            self._query_embedder(await asyncio.to_thread(replica_encoders, settings, model.refs))
            if settings.retrieval.query_embed == "retriever"
            else None
        )
        self.core = RetrieverCore(self.pool, self.slug, settings)
        self._foreign: dict[str, RetrieverCore] = {}  # other tables, uncached
        self.listener = ChangeListener(dsn, self._invalidate)
        self.listener.start()
        self.flusher = Flusher([self.core.metrics]).start()  # cache outcomes, hit rate, bytes
        self.models = ModelView(
            self.pool, dsn, model, poll_s=settings.reembed.poll_s, on_switch=self._switch
        ).start()

    def _query_embedder(self, encoders: EncoderSet) -> QueryEmbedder:
        return QueryEmbedder(encoders, self.settings.retrieval.query_batch_max)

    def _invalidate(self, tenant_id: str, owner: str, version: int) -> None:
        self.core.cache.invalidate(tenant_id, owner, version)

    def _switch(self, model: ModelFacts) -> None:
        """The registry's active table changed: a new core (and cache) over it."""
        old, old_slug, self.slug = self.core, self.slug, model.table_slug
        self.core = RetrieverCore(self.pool, self.slug, self.settings)
        self.flusher.sets = [self.core.metrics]
        self._foreign.pop(self.slug, None)
        old.cache.budget = 0  # keeps answering stale callers, uncached (loads put nothing)
        old.cache.drop_where(lambda key: True)
        self._foreign[old_slug] = old

    async def _core_for(self, model: str | None) -> RetrieverCore:
        if model is None or model == self.slug:
            return self.core
        await self.models.refresh()  # perhaps this replica has not heard of a switch yet
        if model == self.slug:
            return self.core
        core = self._foreign.get(model)
        if core is None:
            core = RetrieverCore(self.pool, model, self.settings.with_(cache={"budget_mb": 0}))
            self._foreign[model] = core
        return core

    @serve.multiplexed(
        max_num_models_per_replica=get_settings().retrieval.retrieval_shards_per_replica
    )
    async def shard(self, shard_id: str) -> Shard:
        return Shard(shard_id, self)

    async def search(
        self, q: SearchQuery, vector: np.ndarray, model: str | None = None
    ) -> list[dict]:
        """``model``: the table slug of the model that embedded ``vector`` (None: active)."""
        shard_id = serve.get_multiplexed_model_id()
        if shard_id:
            await self.shard(shard_id)
        core = await self._core_for(model)
        return await core.search(q, vector)

    async def search_text(
        self, queries: Sequence[SearchQuery], ref: str | None = None, model: str | None = None
    ) -> list[list[dict]]:
        """Each query's text embedded here with ``ref`` (the model whose table ``model`` is;
        None: the active one), then searched: one Serve call per search (or per context)."""
        shard_id = serve.get_multiplexed_model_id()
        if shard_id:
            await self.shard(shard_id)
        if self.queries is None:  # routed to the Embedder by setting, yet asked: load now
            refs = [ref] if ref else []
            settings = self.settings
            self.queries = self._query_embedder(
                await asyncio.to_thread(replica_encoders, settings, refs)
            )
        core = await self._core_for(model)
        embedder = self.queries

        async def embed(texts: list[str]) -> np.ndarray:
            return await embedder.embed(texts, ref)

        async def embed_views(texts: list[str], views: list[list[Spans]]) -> list[np.ndarray]:
            return await embedder.embed_views(texts, views, ref)

        return await search_texts(queries, embed, core.search, embed_views)

    async def stats(self) -> dict:
        """Cache counters of this replica (tests, debugging)."""
        import os

        return {
            "pid": os.getpid(),
            **self.core.cache.stats(),
            **self.core.served,
            "notifications": self.listener.received,
            "model": self.slug,
            "query_runs": self.queries.runs if self.queries else 0,
            "query_models": (
                sorted({e.spec.name for e in self.queries.encoders.loaded()})
                if self.queries
                else []
            ),
        }

    async def __del__(self) -> None:
        await self.flusher.stop()
        await self.models.stop()
        await self.pool_metrics.stop()
        await self.listener.stop()
        await self.core.close()
        await self.pool.close()
        if self.queries is not None:
            self.queries.close()
