"""Retriever deployment: search the caller's memories and rank them."""

from __future__ import annotations

import numpy as np
from ray import serve

from models import get_spec
from serve_app.db.pool import open_pool
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever as RetrieverCore
from serve_app.settings import get_settings


@serve.deployment
class Retriever:
    async def __init__(self) -> None:
        settings = get_settings()
        if not settings.database_url:
            raise RuntimeError("MEMSERVE_DATABASE_URL is not set (the launcher sets it)")
        slug = get_spec(settings.embed_model).table_slug
        self.pool = await open_pool(settings.database_url, settings)
        self.core = RetrieverCore(self.pool, slug, settings)

    async def search(self, q: SearchQuery, vector: np.ndarray) -> list[dict]:
        return await self.core.search(q, vector)
