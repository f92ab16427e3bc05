"""Ingress deployment: the FastAPI app, served by this replica (HAProxy or Serve's proxy in front).

Thin wrapper: the composition root (``serve_app.composition.build_services``)
builds every service once per replica, with the other deployments' handles
behind plain callables; the app is built after it (Serve's late-bound
``__serve_build_asgi_app__``), so routes reach the services through
``app.state`` and ``Depends``, never a module global.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from serve_app.api import create_app
from serve_app.bootstrap import ModelFacts
from serve_app.composition import Backends, Services, build_services
from serve_app.db.resolve import resolve_dsn
from serve_app.extraction.probe import extraction_probe
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.shards import shard_key
from serve_app.settings import get_settings


@serve.deployment
@serve.ingress()
class Ingress:
    async def __init__(
        self,
        model: ModelFacts,
        embedder: DeploymentHandle,
        retriever: DeploymentHandle,
        extractor: DeploymentHandle | None = None,
    ) -> None:
        self.settings = get_settings()
        self.embedder = embedder
        self.retriever = retriever
        self.extractor = extractor
        dsn = resolve_dsn(self.settings)  # launcher's DSN, else the embedded server
        self.services: Services = await build_services(
            self.settings,
            model,
            dsn,
            Backends(
                embed=self._embed,
                search=self._search,
                submit_extraction=self._submit if extractor is not None else None,
                probes={"embedder": self._probe_embedder, "extraction": self._probe_extraction},
            ),
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.settings, self.services)

    async def _embed(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        if len(texts) == 1:
            vector = await self.embedder.embed.remote(texts[0], is_query)
            return np.asarray(vector, dtype=np.float32)[None, :]
        vectors = await self.embedder.embed_many.remote(list(texts), is_query)
        return np.asarray(vectors, dtype=np.float32)

    async def _search(self, q: SearchQuery, vector: np.ndarray) -> list[dict]:
        # Route by shard so the user's cache stays warm on one retriever replica.
        shard = shard_key(q, self.settings.retrieval.retrieval_shards)
        return await self.retriever.options(multiplexed_model_id=shard).search.remote(q, vector)

    def _submit(self, tenant: str, user: str, session: str, force: bool):
        assert self.extractor is not None
        return self.extractor.process.remote(tenant, user, session, force)

    async def _probe_extraction(self) -> str:
        return await extraction_probe(self.settings, self.extractor)

    async def _probe_embedder(self) -> str:
        info = await self.embedder.model_info.remote()
        return f"ok ({info['name']}, {info.get('device', 'cpu')})"

    async def __del__(self) -> None:
        services = getattr(self, "services", None)
        if services is not None:
            await asyncio.shield(services.aclose())
