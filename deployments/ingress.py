"""Ingress deployment: the FastAPI app behind Serve's HTTP proxy.

Thin wrapper: it wires Ray handles (embedder, retriever) into the plain
``MemoryService`` and opens the database pool; all logic lives in serve_app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from serve_app.api import create_app
from serve_app.api.state import AppState, install
from serve_app.db.listener import NotifyListener
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.db.resolve import resolve_dsn
from serve_app.extraction.wiring import extraction_extras, extraction_probe
from serve_app.metrics import start_pool_metrics
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.shards import shard_key
from serve_app.service import MemoryService
from serve_app.settings import get_settings
from serve_app.store import MemoryStore
from serve_app.store.key_cache import KEYS_CHANNEL, KeyCache
from serve_app.store.keys import KeyStore, seed_key
from serve_app.store.vectors import ensure_table

log = logging.getLogger("ray.serve")
fastapi_app = create_app(get_settings())


@serve.deployment
@serve.ingress(fastapi_app)
class Ingress:
    async def __init__(
        self,
        embedder: DeploymentHandle,
        retriever: DeploymentHandle,
        extractor: DeploymentHandle | None = None,
    ) -> None:
        settings = get_settings()
        resolve_dsn(settings)  # launcher's DSN, else the embedded server (`serve run`)
        dsn = settings.database_url
        self.embedder = embedder
        self.retriever = retriever
        self.extractor = extractor
        info = await embedder.model_info.remote()
        await asyncio.to_thread(migrate, dsn)
        await asyncio.to_thread(ensure_table, dsn, info["table_slug"], info["dim"])
        if settings.bootstrap_key:
            await asyncio.to_thread(
                seed_key,
                dsn,
                settings.default_tenant,
                "service",
                settings.bootstrap_key,
                "bootstrap",
            )
        if settings.admin_key:
            await asyncio.to_thread(
                seed_key, dsn, settings.default_tenant, "admin", settings.admin_key, "admin"
            )
        self.pool = await open_pool(dsn, settings)
        self.pool_metrics = start_pool_metrics(
            self.pool, "ingress", settings.pool_metrics_interval_s
        )
        key_cache = KeyCache(settings.auth_cache_ttl_s, settings.auth_cache_max_keys)
        self.key_listener = NotifyListener(
            dsn, KEYS_CHANNEL, key_cache.drop, on_connect=key_cache.clear
        )
        key_cache.trusted = self.key_listener.connected.is_set
        self.key_listener.start()
        install(
            AppState(
                settings=settings,
                pool=self.pool,
                keys=KeyStore(self.pool, key_cache),
                service=MemoryService(
                    MemoryStore(self.pool, info["table_slug"]), self._embed, self._search
                ),
                model=info,
                readiness_probes={
                    "embedder": self._probe_embedder,
                    "extraction": self._probe_extraction,
                },
                extras=extraction_extras(settings, extractor),
            )
        )

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        if len(texts) == 1:
            vector = await self.embedder.embed.remote(texts[0], is_query)
            return np.asarray(vector, dtype=np.float32)[None, :]
        # One call per text so the embedder's dynamic batching can mix callers.
        vectors = await asyncio.gather(*(self.embedder.embed.remote(t, is_query) for t in texts))
        return np.stack([np.asarray(v, dtype=np.float32) for v in vectors])

    async def _search(self, q: SearchQuery, vector: np.ndarray) -> list[dict]:
        # Route by shard so the user's cache stays warm on one retriever replica.
        shard = shard_key(q, get_settings().retrieval_shards)
        return await self.retriever.options(multiplexed_model_id=shard).search.remote(q, vector)

    async def _probe_extraction(self) -> str:
        return await extraction_probe(get_settings(), self.extractor)

    async def _probe_embedder(self) -> str:
        info = await self.embedder.model_info.remote()
        return f"ok ({info['name']}, {info.get('device', 'cpu')})"

    async def __del__(self) -> None:
        listener = getattr(self, "key_listener", None)
        if listener is not None:
            await listener.stop()
        pool = getattr(self, "pool", None)
        if pool is not None:
            await pool.close()
