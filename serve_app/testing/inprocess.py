"""The app's services without Ray, for in-process API tests: the composition root over
real Postgres, the real ONNX encoder and the real retriever (what the Ingress builds,
with the Embedder and Retriever deployments replaced by direct calls). Searches take the
route ``settings.retrieval.query_embed`` names: the retriever's own query embedder, or
the embed callable (the Embedder's role); one encoder object serves both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import httpx
import numpy as np
from fastapi import FastAPI

from models.encoder import Encoder
from models.encoder_set import EncoderSet
from serve_app.api import create_app
from serve_app.composition import build_services
from serve_app.db.pool import open_pool
from serve_app.embedding_model import ModelFacts
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.query_embed import QueryEmbedder, search_texts
from serve_app.retrieval.retriever import Retriever
from serve_app.services.backends import Backends
from serve_app.services.health import Probe
from serve_app.services.registry import Services
from serve_app.settings import Settings


@asynccontextmanager
async def in_process_services(
    settings: Settings,
    model: ModelFacts,
    dsn: str,
    encoder: Encoder,
    probes: Mapping[str, Probe] | None = None,
    embedded: list[tuple[list[str], bool]] | None = None,
    bulk_calls: list[list[str]] | None = None,
) -> AsyncIterator[Services]:
    """Services built by the composition root; closes them, the retriever and its pool.
    ``embedded`` collects (texts, is_query) of each call to the embed backend;
    ``bulk_calls`` the texts of each call that asked for the Embedder's bulk lane."""

    async def embed(texts: Sequence[str], *, is_query: bool, bulk: bool = False) -> np.ndarray:
        if embedded is not None:
            embedded.append((list(texts), is_query))
        if bulk_calls is not None and bulk:
            bulk_calls.append(list(texts))
        return encoder.encode(list(texts), is_query=is_query)

    async def embed_queries(texts: list[str]) -> np.ndarray:
        return await embed(texts, is_query=True)

    queries = QueryEmbedder(EncoderSet(encoder, lambda ref: encoder))

    async def search(batch: Sequence[SearchQuery]) -> list[list[dict]]:
        if settings.retrieval.query_embed == "retriever":
            return await search_texts(batch, queries.embed, retriever.search, queries.embed_views)
        return await search_texts(batch, embed_queries, retriever.search)

    pool = await open_pool(dsn, settings, min_size=1)
    retriever = Retriever(pool, model.table_slug, settings)
    backends = Backends(embed, search, probes=dict(probes or {}))
    services = await build_services(settings, model, dsn, backends)
    try:
        yield services
    finally:
        await services.aclose()
        await retriever.close()
        await pool.close()
        queries.close()


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[FastAPI]:
    """``app`` between its ASGI lifespan's startup and shutdown, as a server runs it.

    httpx's ASGITransport sends requests only, never the lifespan; an app driven by it
    alone never hears "shutdown", so what its first request started stays running: the
    request metrics' ``Flusher`` (a ``Periodic`` on the session's loop), the MCP
    session manager. One task enters and leaves the lifespan, as a server's does."""
    to_app: asyncio.Queue[dict] = asyncio.Queue()
    from_app: asyncio.Queue[dict] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.get_running_loop().create_task(app(scope, to_app.get, from_app.put))

    async def answer() -> dict:  # the app's next message, or its error if it ended instead
        message = asyncio.ensure_future(from_app.get())
        await asyncio.wait({message, task}, return_when=asyncio.FIRST_COMPLETED)
        if message.done():
            return message.result()
        message.cancel()
        task.result()
        raise AssertionError("the app's lifespan ended without answering")

    await to_app.put({"type": "lifespan.startup"})
    started = await answer()
    assert started["type"] == "lifespan.startup.complete", started
    try:
        yield app
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        stopped = await answer()
        await task
        assert stopped["type"] == "lifespan.shutdown.complete", stopped


@asynccontextmanager
async def in_process_app(settings: Settings, services: Services) -> AsyncIterator[FastAPI]:
    """The app over ``services``, running (its lifespan started, stopped on exit)."""
    async with running(create_app(settings, services)) as app:
        yield app


def bearer_client(app: FastAPI, key: str) -> httpx.AsyncClient:
    """An HTTP client on the app over an in-process ASGI transport, authenticated by ``key``."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://t",
        headers={"Authorization": f"Bearer {key}"},
    )


@asynccontextmanager
async def bearer_clients(
    app: FastAPI, keys: Mapping[str, str]
) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A :func:`bearer_client` per name in ``keys`` (name -> key), all closed on exit:
    the callers a test plays (the service, an admin, a user, another tenant)."""
    clients = {name: bearer_client(app, key) for name, key in keys.items()}
    try:
        yield clients
    finally:
        for c in clients.values():
            await c.aclose()


@asynccontextmanager
async def in_process_api(
    settings: Settings,
    model: ModelFacts,
    dsn: str,
    encoder: Encoder,
    key: str,
    probes: Mapping[str, Probe] | None = None,
    embedded: list[tuple[list[str], bool]] | None = None,
    bulk_calls: list[list[str]] | None = None,
) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """:func:`in_process_services` behind the app, with a client authenticated by ``key``."""
    async with (
        in_process_services(
            settings, model, dsn, encoder, probes, embedded, bulk_calls
        ) as services,
        in_process_app(settings, services) as app,
        bearer_client(app, key) as client,
    ):
        yield client, services


async def user_key(c: httpx.AsyncClient, admin_key: str, user: str) -> dict[str, str]:
    """Headers of a new user key for ``user``, minted with ``admin_key`` over the API."""
    r = await c.post(
        "/v1/admin/keys",
        json={"role": "user", "user_id": user},
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}
