"""Retriever deployment: hot FAISS cache + pgvector, routed by shard with Serve multiplexing.

The ingress calls ``retriever.options(multiplexed_model_id=shard).search.remote(...)``
(``serve_app.retrieval.shards``); Serve then prefers the replica that already "loaded"
the shard, so a user's cache entries stay warm on one replica. When Serve unloads a
shard (LRU over ``retrieval_shards_per_replica``) its users' entries are dropped.
Freshness across replicas: version check per search, plus LISTEN invalidation.
"""

from __future__ import annotations

import logging

import numpy as np
from ray import serve

from serve_app.bootstrap import ModelFacts
from serve_app.db.pool import open_pool
from serve_app.db.resolve import resolve_dsn
from serve_app.metrics import Flusher, start_pool_metrics
from serve_app.retrieval.listener import ChangeListener
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever as RetrieverCore
from serve_app.retrieval.shards import shard_of
from serve_app.settings import get_settings

log = logging.getLogger("ray.serve")


class Shard:
    """What Serve multiplexes: a shard id; unloading it drops its users from the cache."""

    def __init__(self, shard_id: str, core: RetrieverCore) -> None:
        self.shard_id = shard_id
        self.core = core

    async def __del__(self) -> None:
        shards = self.core.r.retrieval_shards
        self.core.cache.drop_where(lambda key: shard_of(key[0], key[1], shards) == self.shard_id)


@serve.deployment
class Retriever:
    async def __init__(self, model: ModelFacts) -> None:
        settings = get_settings()
        dsn = resolve_dsn(settings)  # launcher's DSN, else the embedded server (`serve run`)
        slug = model.table_slug
        self.pool = await open_pool(dsn, settings)
        self.pool_metrics = start_pool_metrics(
            self.pool, "retriever", settings.db.metrics_interval_s
        )
        self.core = RetrieverCore(self.pool, slug, settings)
        self.listener = ChangeListener(dsn, self.core.cache.invalidate)
        self.listener.start()
        self.flusher = Flusher([self.core.metrics]).start()  # cache outcomes, hit rate, bytes

    @serve.multiplexed(
        max_num_models_per_replica=get_settings().retrieval.retrieval_shards_per_replica
    )
    async def shard(self, shard_id: str) -> Shard:
        return Shard(shard_id, self.core)

    async def search(self, q: SearchQuery, vector: np.ndarray) -> list[dict]:
        shard_id = serve.get_multiplexed_model_id()
        if shard_id:
            await self.shard(shard_id)
        return await self.core.search(q, vector)

    async def stats(self) -> dict:
        """Cache counters of this replica (tests, debugging)."""
        import os

        return {
            "pid": os.getpid(),
            **self.core.cache.stats(),
            **self.core.served,
            "notifications": self.listener.received,
        }

    async def __del__(self) -> None:
        await self.flusher.stop()
        await self.pool_metrics.stop()
        await self.listener.stop()
        await self.core.close()
        await self.pool.close()
