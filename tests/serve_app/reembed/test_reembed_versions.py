"""A settling repair bumps owners' versions as any write does, over every tenant in a batch."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import psycopg

from serve_app.db.pool import open_pool
from serve_app.metrics import ReembedMetrics
from serve_app.reembed.worker import Reembedder
from serve_app.retrieval.listener import ChangeListener
from serve_app.retrieval.query import SearchQuery
from serve_app.retrieval.retriever import Retriever
from serve_app.settings import ReembedSettings, Settings
from serve_app.store import NewMemory, Owner
from serve_app.store.guarded import GuardedWriter
from serve_app.store.model_registry import Wanted, reconcile
from serve_app.store.vectors import ensure_table
from serve_app.store.versions import CHANGES_CHANNEL

A = Wanted("model_a", "ref-a", "model-a", 384)
B = Wanted("model_b", "ref-b", "model-b", 512)
TEXTS = {
    Owner("t1", "alice"): ["I am allergic to peanuts", "My sister lives in Lyon"],
    Owner("t2", "bob"): ["I play the cello on weekends", "My passport expires in 2031"],
}
EDITS = {
    Owner("t1", "alice"): "I moved to Porto last week",
    Owner("t2", "bob"): "My favourite dish is a green curry",
}


def no_legacy(_slug: str) -> Wanted | None:
    return None


def query(owner: Owner) -> SearchQuery:
    return SearchQuery(tenant_id=owner.tenant_id, user_id=owner.user_id, top_k=5, mode="dense")


def key(owner: Owner) -> tuple[str, str]:
    return owner.tenant_id, query(owner).owner_keys[0]


async def versions(pool) -> dict[tuple[str, str], int]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT tenant_id, owner, version FROM memory_owner_versions")
        return {(r["tenant_id"], r["owner"]): r["version"] for r in await cur.fetchall()}


class Heard:
    """NOTIFY payloads on the change channel, raw (to compare a write's and a repair's)."""

    conn: psycopg.AsyncConnection | None = None

    async def listen(self, dsn: str) -> None:
        self.conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await self.conn.execute(f"LISTEN {CHANGES_CHANNEL}")

    async def drain(self, n: int) -> list[list]:
        """The next ``n`` payloads (sorted: their order within a statement is not fixed)."""
        got = [json.loads(m.payload) async for m in self.conn.notifies(timeout=5.0, stop_after=n)]
        return sorted(got)


async def test_repair_bumps_each_tenants_owner_like_a_write(fresh_db, encoder_a, encoder_b):
    ensure_table(fresh_db, A.slug, A.dim)
    reconcile(fresh_db, A, no_legacy)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    heard, listener = Heard(), None
    try:
        store_a = GuardedWriter(pool, A.slug)
        ids = {}
        for owner, texts in TEXTS.items():
            rows = await store_a.add(owner, [NewMemory(t) for t in texts], encoder_a.encode(texts))
            ids[owner] = rows[0]["id"]
        ensure_table(fresh_db, B.slug, B.dim)
        reconcile(fresh_db, B, no_legacy)

        async def embed(texts: list[str], ref: str) -> np.ndarray:
            assert ref == B.ref
            return encoder_b.encode(texts)

        # one batch holds every row: both tenants' owners are bumped by one statement
        conf = ReembedSettings(batch=100, rate_per_s=0, settle_s=30, margin_s=0)
        worker = Reembedder(fresh_db, embed, conf, ReembedMetrics())
        assert await worker.run_once() == "switched"

        # two replicas of the new table: one hears the NOTIFYs (as the deployment does), one
        # lost them and has only the version check of every search
        retriever, deaf = Retriever(pool, B.slug, Settings()), Retriever(pool, B.slug, Settings())
        listener = ChangeListener(fresh_db, retriever.cache.invalidate)
        listener.start()
        await heard.listen(fresh_db)
        await asyncio.wait_for(listener.connected.wait(), 10)  # its LISTEN is in place

        # a replica that has not heard of the switch edits one memory per owner (table A)
        start = await versions(pool)
        for owner, text in EDITS.items():
            vec = encoder_a.encode([text])[0]
            await store_a.update(owner, ids[owner], {"content": text}, vec)
        written = await versions(pool)
        by_write = await heard.drain(len(EDITS))
        assert by_write == sorted([*key(o), written[key(o)]] for o in EDITS)
        # both owners cached at the written version (with the vectors of the old text)
        for owner in EDITS:
            for r in (retriever, deaf):
                await r.search(query(owner), encoder_b.encode(["x"], is_query=True)[0])
                assert r.cache.get(key(owner), written[key(owner)]) is not None

        assert await worker.run_once() == "settling"  # the repair embeds the edits into B
        repaired = await versions(pool)
        by_repair = await heard.drain(len(EDITS))
        assert by_repair == sorted([*key(o), repaired[key(o)]] for o in EDITS)
        for owner in EDITS:  # the repair moved each version exactly as the write did
            k = key(owner)
            assert written[k] - start[k] == 1
            assert repaired[k] - written[k] == written[k] - start[k]
        assert set(repaired) == set(written) == {key(o) for o in EDITS}

        # the listening replica dropped both entries on the NOTIFYs
        await _until(lambda: not any(key(o) in retriever.cache for o in EDITS))
        for owner, text in EDITS.items():
            k = key(owner)
            assert k in deaf.cache and deaf.cache.get(k, repaired[k]) is None  # refused
            assert deaf.cache.invalidations == list(EDITS).index(owner) + 1
            for r in (retriever, deaf):
                doc = encoder_b.encode([text])[0]  # exactly what the repair stored
                [best, *_] = await r.search(query(owner), doc)
                assert best["content"] == text  # the reload has the repaired vector
                assert best["similarity"] > 0.999, best["similarity"]
                assert r.cache.get(k, repaired[k]).version == repaired[k]
    finally:
        if listener is not None:
            await listener.stop()
        if heard.conn is not None:
            await heard.conn.close()
        await pool.close()


async def _until(done, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")
