"""ModelView against the real registry: what readers see as fills start, end and switch."""

from __future__ import annotations

import pytest

from serve_app.db.pool import open_pool
from serve_app.embedding_model import ModelFacts
from serve_app.reembed.view import ModelView
from serve_app.reembed.worker import Reembedder
from serve_app.settings import ReembedSettings, Settings
from serve_app.store.model_registry import Wanted, reconcile
from serve_app.store.vectors import ensure_table

A = Wanted("model_a", "ref-a", "model-a", 384)
B = Wanted("model_b", "ref-b", "model-b", 512)
FACTS_A = ModelFacts(name=A.name, dim=A.dim, table_slug=A.slug, ref=A.ref)
FACTS_B = ModelFacts(name=B.name, dim=B.dim, table_slug=B.slug, ref=B.ref)


def no_legacy(_slug: str) -> Wanted | None:
    return None


def register(dsn: str, wanted: Wanted) -> None:
    ensure_table(dsn, wanted.slug, wanted.dim)
    reconcile(dsn, wanted, no_legacy)


def seen(view: ModelView) -> tuple:
    """What each kind of reader sees: the view's fill, the active facts' fill, the refs."""
    return view.filling, view.active.filling, view.active.refs


@pytest.mark.parametrize("pooled", [False, True], ids=["connection", "pool"])
async def test_refresh_keeps_every_reader_on_the_registry(fresh_db, pooled):
    register(fresh_db, A)
    pool = await open_pool(fresh_db, Settings(), min_size=1) if pooled else None
    switched: list[ModelFacts] = []
    view = ModelView(pool, fresh_db, FACTS_A, on_switch=switched.append)
    try:
        assert await view.refresh() is False
        assert seen(view) == (None, None, ("ref-a",))

        register(fresh_db, B)  # a restart configured B: it fills, A keeps serving
        assert await view.refresh() is False
        assert seen(view) == (FACTS_B, FACTS_B, ("ref-a", "ref-b"))
        assert view.active.table_slug == A.slug and switched == []

        register(fresh_db, A)  # configured back to A: the fill is dropped
        assert await view.refresh() is False
        assert seen(view) == (None, None, ("ref-a",))

        register(fresh_db, B)  # B again, then filled (no memories) and switched to
        assert await view.refresh() is False
        assert seen(view) == (FACTS_B, FACTS_B, ("ref-a", "ref-b"))
        worker = Reembedder(fresh_db, _no_embed, ReembedSettings(rate_per_s=0))
        assert await worker.run_once() == "switched"
        assert await view.refresh() is True
        assert switched == [FACTS_B] and view.active == FACTS_B
        assert seen(view) == (None, None, ("ref-b",))
        assert await view.refresh() is False and switched == [FACTS_B]
    finally:
        if pool is not None:
            await pool.close()


async def _no_embed(texts: list[str], ref: str):
    raise AssertionError(f"nothing to embed, got {len(texts)} texts for {ref}")
