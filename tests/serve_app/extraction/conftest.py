"""Fixtures for the extraction pipeline: real Postgres, real encoder, scripted LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from models import load_encoder
from serve_app.db.pool import open_pool
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.llm.client import LLMClient
from serve_app.settings import Settings
from serve_app.spend.meter import Budgets, SpendMeter
from serve_app.store.llm_spend import SpendStore
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table

MODEL = "all-minilm-l6-v2-int8"


@pytest.fixture(scope="session")
def encoder():
    return load_encoder(MODEL, threads=1)


def test_settings(
    llm_url: str | None, *, llm: dict[str, object] | None = None, **extract: object
) -> Settings:
    """Fast LLM timings; ``llm``/``extract`` override fields of those groups."""
    return Settings().with_(
        llm={
            "base_url": llm_url,
            "timeout_s": 1.0,
            "max_retries": 1,
            "backoff_s": 0.02,
            "breaker_failures": 3,
            "breaker_reset_s": 0.3,
            **(llm or {}),
        },
        extract={
            "every_n_turns": 2,
            "compress_every_m_turns": 100,
            "scan_interval_s": 0.2,
            "retry_backoff_s": 0.0,
            **extract,
        },
    )


class Harness:
    """A pipeline over a fresh database plus helpers to feed it turns."""

    def __init__(self, pipeline: ExtractionPipeline, pool) -> None:
        self.pipeline = pipeline
        self.pool = pool
        self.turns = TurnStore(pool)

    async def say(self, key: SessionKey, *messages: tuple[str, str], meta=None) -> None:
        await self.turns.append(key, list(messages), agent_id=None, ttl_hours=1.0, meta=meta)

    async def rows(self, sql: str, *params) -> list[dict]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()

    async def memories(self, user: str, source: str | None = None) -> list[dict]:
        if source is None:
            return await self.rows(
                "SELECT * FROM memory_items WHERE user_id = %s ORDER BY created_at", user
            )
        return await self.rows(
            "SELECT * FROM memory_items WHERE user_id = %s AND source = %s ORDER BY created_at",
            user,
            source,
        )


@pytest.fixture
async def make_harness(fresh_db, encoder):
    pools, clients, meters = [], [], []
    ensure_table(fresh_db, encoder.spec.table_slug, encoder.spec.dim)

    async def embed(texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

    async def make(settings: Settings, *, spend: Budgets | bool | None = None) -> Harness:
        """``spend``: meter the LLM calls (True), also with these budgets (a callable)."""
        pool = await open_pool(fresh_db, settings, min_size=1)
        await pool.wait()
        pools.append(pool)
        meter = None
        if spend:
            budgets = spend if callable(spend) else None
            meter = SpendMeter(SpendStore(pool), settings.spend, budgets)
            meters.append(meter)
        llm = LLMClient(settings.llm, meter=meter) if settings.llm.base_url else None
        if llm:
            clients.append(llm)
        pipeline = ExtractionPipeline(pool, encoder.spec.table_slug, embed, llm, settings)
        return Harness(pipeline, pool)

    yield make
    for m in meters:  # its metrics Flusher, started by the first metered call
        await m.aclose()
    for c in clients:
        await c.close()
    for p in pools:
        await p.close()
