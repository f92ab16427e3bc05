"""A forget while the re-embed worker embeds a batch: the worker writes no vector for the
forgotten memories (its upsert joins the items still there, under a share lock) and
carries on with the rest."""

from __future__ import annotations

import numpy as np

from serve_app.db.pool import open_pool
from serve_app.metrics import ReembedMetrics
from serve_app.reembed.worker import Reembedder
from serve_app.settings import ReembedSettings, Settings
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.model_registry import Wanted, reconcile
from serve_app.store.vectors import ensure_table, table_name
from tests.serve_app.store.seeding import run, seed_memories

A = Wanted("model_a", "ref-a", "model-a", 384)
B = Wanted("model_b", "ref-b", "model-b", 512)


async def test_a_forget_during_the_embed_step_leaves_no_vector_behind(fresh_db, encoder_b):
    ensure_table(fresh_db, A.slug, A.dim)
    reconcile(fresh_db, A, lambda _slug: None)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    try:
        await seed_memories(pool, A.slug, A.dim, "alice", 4)
        await seed_memories(pool, A.slug, A.dim, "bob", 1)
        ensure_table(fresh_db, B.slug, B.dim)
        assert reconcile(fresh_db, B, lambda _slug: None)[1].state == "filling"
        forgot: dict[str, int] = {}

        async def embed(texts: list[str], ref: str) -> np.ndarray:
            if not forgot:  # alice is forgotten while her batch is being embedded
                forgot.update(await ForgetStore(pool, A.slug).forget(Scope("t1", "alice")))
            return encoder_b.encode(texts)

        settings = ReembedSettings(batch=10, rate_per_s=0, settle_s=30)
        await Reembedder(fresh_db, embed, settings, ReembedMetrics()).run_once()
        assert forgot["memories"] == 4
        vectors = await run(
            pool,
            f"SELECT i.user_id FROM {table_name(B.slug)} v JOIN memory_items i ON i.id = v.item_id",
        )
        assert vectors == [{"user_id": "bob"}]  # the run went on: bob's batch-mate was written
    finally:
        await pool.close()
