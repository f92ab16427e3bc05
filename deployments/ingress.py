"""Ingress deployment: the FastAPI app, served by this replica (HAProxy or Serve's proxy in front).

Thin wrapper: the composition root (``serve_app.composition.build_services``)
builds every service once per replica, with the other deployments' handles
behind plain callables; the app is built after it (Serve's late-bound
``__serve_build_asgi_app__``), so routes reach the services through
``app.state`` and ``Depends``, never a module global.

A model change (serve_app/reembed): the services are built for one model, their embed
and search callables bound to it, so a request embeds and writes with one model from
start to end. When the registry's active model changes (:class:`ModelView`) the replica
builds services for the new model, hands them to new requests, and closes the old ones
once the requests in flight on them are done.

A search is one Serve call by default: the Retriever embeds the query text itself
(``MEMSERVE_QUERY_EMBED=retriever``); with ``embedder`` the Ingress gets the
vector from the Embedder first (batched there, e.g. on a GPU), then calls the Retriever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from serve_app.api import create_app
from serve_app.composition import build_services
from serve_app.db.resolve import resolve_dsn
from serve_app.embedding_model import ModelFacts
from serve_app.extraction.probe import extraction_probe
from serve_app.reembed.view import ModelView
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.query_embed import search_texts
from serve_app.retrieval.shards import shard_key
from serve_app.services.backends import Backends
from serve_app.services.registry import Services
from serve_app.settings import get_settings
from serve_app.store.model_registry import describe

log = logging.getLogger("ray.serve")
RETIRE_SERVICES_S = 10.0  # old services outlive a model switch this long (requests in flight)


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
        self.dsn = resolve_dsn(self.settings)  # launcher's DSN, else the embedded server
        self.services: Services = await build_services(
            self.settings, model, self.dsn, self._backends(model)
        )
        self._asgi: FastAPI | None = None
        self._retiring: set[asyncio.Task] = set()
        self.models = ModelView(
            None, self.dsn, model, poll_s=self.settings.reembed.poll_s, on_switch=self._switch
        ).start()

    def __serve_build_asgi_app__(self) -> FastAPI:
        self._asgi = create_app(self.settings, self.services)
        return self._asgi

    def _backends(self, model: ModelFacts) -> Backends:
        """Callables bound to ``model``: its embeddings go with its table."""
        return Backends(
            embed=functools.partial(self._embed, model=model),
            search=functools.partial(self._search, model=model),
            submit_extraction=self._submit if self.extractor is not None else None,
            run_extraction=self._run_now if self.extractor is not None else None,
            probes={
                "embedder": self._probe_embedder,
                "extraction": self._probe_extraction,
                "models": self._probe_models,
            },
        )

    def _switch(self, model: ModelFacts) -> None:
        task = asyncio.ensure_future(self._serve_model(model))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _serve_model(self, model: ModelFacts) -> None:
        """New requests get services of ``model``; the old ones close when drained."""
        fresh = await build_services(self.settings, model, self.dsn, self._backends(model))
        old, self.services = self.services, fresh
        if self._asgi is not None:
            self._asgi.state.services = fresh
        log.info("ingress serves embedding model %s", model.name)
        await asyncio.sleep(RETIRE_SERVICES_S)
        await asyncio.shield(old.aclose())

    async def _embed(
        self, texts: Sequence[str], *, is_query: bool, model: ModelFacts, bulk: bool = False
    ) -> np.ndarray:
        """``bulk``: the Embedder's bulk lane (document chunks, imports), after the
        interactive callers (deployments/embedder.py)."""
        ref = model.ref or None
        if len(texts) == 1 and not bulk:
            vector = await self.embedder.embed.remote(texts[0], is_query, ref)
            return np.asarray(vector, dtype=np.float32)[None, :]
        vectors = await self.embedder.embed_many.remote(list(texts), is_query, ref, bulk)
        return np.asarray(vectors, dtype=np.float32)

    async def _search(
        self, queries: Sequence[SearchQuery], *, model: ModelFacts
    ) -> list[list[dict[str, Any]]]:
        """Queries by text, embedded with ``model`` and searched in its table."""
        if not queries:
            return []
        if self.settings.retrieval.query_embed == "retriever":  # one hop: the Retriever embeds
            handle = self._retriever_for(queries[0])  # one user's searches: one shard
            return await handle.search_text.remote(
                list(queries), model.ref or None, model.table_slug
            )

        async def embed(texts: list[str]) -> np.ndarray:
            return await self._embed(texts, is_query=True, model=model)

        async def search(q: SearchQuery, vector: np.ndarray) -> list[dict[str, Any]]:
            return await self._retriever_for(q).search.remote(q, vector, model.table_slug)

        return await search_texts(queries, embed, search)

    def _retriever_for(self, q: SearchQuery) -> DeploymentHandle:
        """Routed by shard so the user's cache stays warm on one retriever replica."""
        shard = shard_key(q, self.settings.retrieval.retrieval_shards)
        return self.retriever.options(multiplexed_model_id=shard)

    def _submit(self, tenant: str, user: str, session: str, force: bool):
        assert self.extractor is not None
        return self.extractor.process.remote(tenant, user, session, force)

    def _run_now(self, tenant: str, user: str, session: str, force: bool):
        assert self.extractor is not None
        return self.extractor.process_now.remote(tenant, user, session, force)

    async def _probe_extraction(self) -> str:
        return await extraction_probe(self.settings, self.extractor)

    async def _probe_models(self) -> str:
        """What serves, and a re-embed's progress (never fails readiness by itself)."""
        await self.models.refresh()
        return describe(self.models.rows)

    async def _probe_embedder(self) -> str:
        info = await self.embedder.model_info.remote()
        return f"ok ({info['name']}, {info.get('device', 'cpu')})"

    async def __del__(self) -> None:
        if getattr(self, "models", None) is not None:
            await self.models.stop()
        for task in list(getattr(self, "_retiring", ())):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        services = getattr(self, "services", None)
        if services is not None:
            await asyncio.shield(services.aclose())
