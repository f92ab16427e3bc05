"""Consolidation on a real database, the real encoder and the scripted LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from serve_app.consolidation.job import Consolidator
from serve_app.db.pool import open_pool
from serve_app.llm.client import LLMClient
from serve_app.settings import Settings
from serve_app.spend.meter import SpendMeter
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.llm_spend import SpendStore
from serve_app.store.vectors import ensure_table
from tests.serve_app.extraction.conftest import encoder  # noqa: F401


class Env:
    def __init__(
        self, pool, consolidator: Consolidator, store: GuardedWriter, embed, slug: str
    ) -> None:
        self.pool, self.job, self.store, self.embed = pool, consolidator, store, embed
        self.slug = slug  # the vector table's model, for a second "replica" Consolidator

    async def add(self, owner: Owner, text: str, *, days_ago: float = 0, **kw) -> dict:
        [row] = await self.store.add(
            owner, [NewMemory(content=text, **kw)], await self.embed([text], is_query=False)
        )
        if days_ago:
            await self.sql(
                "UPDATE memory_items SET created_at = now() - %s * interval '1 day',"
                " updated_at = now() - %s * interval '1 day' WHERE id = %s",
                days_ago,
                days_ago,
                row["id"],
            )
        return row

    async def sql(self, query: str, *params) -> list[dict]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []

    async def active(self, user: str) -> list[dict]:
        return await self.sql(
            "SELECT * FROM memory_items WHERE user_id = %s AND status = 'active'"
            " ORDER BY created_at",
            user,
        )


@pytest.fixture
async def make_env(fresh_db, encoder):  # noqa: F811
    pools, clients, meters = [], [], []
    ensure_table(fresh_db, encoder.spec.table_slug, encoder.spec.dim)

    async def embed(texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

    async def make(
        llm_url: str | None, db: dict | None = None, *, spend: bool = False, **overrides
    ) -> Env:
        """``db``: pool settings (e.g. pool_max); ``spend``: LLM calls metered in the
        database (serve_app/spend/meter.py); ``overrides``: consolidation settings."""
        settings = Settings().with_(
            llm={"base_url": llm_url, "timeout_s": 2.0, "max_retries": 0},
            consolidate=overrides,
            db=db or {},
        )
        pool = await open_pool(fresh_db, settings, min_size=1)
        await pool.wait()
        pools.append(pool)
        meter = SpendMeter(SpendStore(pool), settings.spend) if spend else None
        if meter:
            meters.append(meter)
        llm = LLMClient(settings.llm, meter=meter) if llm_url else None
        if llm:
            clients.append(llm)
        slug = encoder.spec.table_slug
        job = Consolidator(pool, slug, embed, llm, settings.consolidate)
        return Env(pool, job, GuardedWriter(pool, slug), embed, slug)

    yield make
    for c in clients:
        await c.close()
    for m in meters:
        await m.aclose()
    for p in pools:
        await p.close()
