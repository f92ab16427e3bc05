"""The re-embed worker: fills a new model's vector table, switches, then settles.

One worker runs cluster-wide (a session advisory lock on its own connection; every
Extractor replica tries, the others find it taken). A turn of :meth:`Reembedder.run_once`:

1. fill: memories in write order (keyset on ``seq`` from the registry's cursor, which is
   advanced in the same transaction as each batch's vectors, so a restart resumes where
   the last batch committed), embedded with the new model through the Embedder,
   rate-limited to ``rate_per_s`` texts;
2. repair: memories edited since the table's watermark (``synced_until``) are embedded
   again, so a PATCH made after the fill passed an item is not lost; the watermark
   moves to the pass's start minus ``margin_s`` (writes that began earlier but committed
   later are caught by the next pass);
3. switch: the new table becomes active and the old one retired in one transaction,
   NOTIFYing ``memserve_models``; replicas switch their embedding model and tables;
4. settle: for ``settle_s`` after the switch, repair passes on the now active table
   pick up writes of replicas that had not heard of the switch yet (they wrote the old
   table), bumping the owners' versions so retriever caches reload them.

Each write re-checks the item's content (md5) under a share lock, so a vector computed
from text that changed meanwhile is never stored over a fresher one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import numpy as np
import psycopg
from pgvector.psycopg import register_vector_async
from psycopg import sql
from psycopg.rows import dict_row

from serve_app.metrics import ReembedMetrics
from serve_app.settings import ReembedSettings
from serve_app.store.model_registry import MODELS_CHANNEL, REEMBED_LOCK, ModelRow, models
from serve_app.store.vectors import table_name
from serve_app.store.versions import CHANGES_CHANNEL, NOTIFIED, bump_owner_ctes

log = logging.getLogger("ray.serve")

#: (texts, model ref) -> (n, dim) float32 document vectors of that model
Embed = Callable[[list[str], str], Awaitable[np.ndarray]]
Turn = Literal["busy", "idle", "partial", "switched", "settling", "settled", "abandoned"]
Sleep = Callable[[float], Awaitable[object]]

_BATCH_SQL = (
    "SELECT id, content, md5(content) AS h, seq FROM memory_items"
    " WHERE seq > %(after)s{since} ORDER BY seq LIMIT %(n)s"
)


def _upsert(table: str, bump: bool) -> sql.Composed:
    """Vectors for items whose content is still what was embedded (locked meanwhile).

    ``bump``: an active table, so the owners' versions move (the store's own bump, over
    the batch's tenants) and every replica's cache reloads the rows.
    """
    tail = sql.SQL(" SELECT (SELECT count(*) FROM ins) AS n")
    if bump:
        tail = sql.SQL(", {bump} SELECT (SELECT count(*) FROM ins) AS n, {notified} AS notified")
        tail = tail.format(
            bump=bump_owner_ctes(sql.SQL("SELECT tenant_id, owner FROM ins")), notified=NOTIFIED
        )
    return sql.SQL(
        "WITH src AS (SELECT * FROM unnest(%(ids)s::uuid[], %(hs)s::text[], %(vecs)s::vector[])"
        " AS s(id, h, embedding)),"
        " live AS (SELECT i.id, i.tenant_id, i.owner, s.embedding FROM memory_items i"
        " JOIN src s ON s.id = i.id WHERE md5(i.content) = s.h FOR SHARE OF i),"
        " ins AS (INSERT INTO {t} (item_id, tenant_id, owner, embedding)"
        " SELECT id, tenant_id, owner, embedding FROM live"
        " ON CONFLICT (item_id) DO UPDATE SET embedding = EXCLUDED.embedding"
        " RETURNING item_id, tenant_id, owner){tail}"
    ).format(t=sql.Identifier(table_name(table)), tail=tail)


class Abandoned(RuntimeError):
    """The target left the 'filling' state (a restart configured another model)."""


class Reembedder:
    def __init__(
        self,
        dsn: str,
        embed: Embed,
        settings: ReembedSettings,
        metrics: ReembedMetrics | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``sleep`` and ``clock`` pace the loop and the rate limit; tests pass their own
        rather than patching ``asyncio.sleep``, which every other task on the loop awaits."""
        self.dsn = dsn
        self.embed = embed
        self.s = settings
        self.metrics = metrics or ReembedMetrics()
        self.sleep, self.clock = sleep, clock
        self._next_at = 0.0  # rate limit: monotonic time the next batch may start

    async def run(self) -> None:
        """Forever: a turn, then ``poll_s`` of sleep (faster while a switch settles)."""
        while True:
            try:
                turn = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("re-embed turn failed; retrying")
                turn = "idle"
            if turn == "settling":  # repair passes every second until the switch settles
                pause = min(self.s.poll_s, 1.0)
            elif turn in ("busy", "idle", "settled"):
                pause = self.s.poll_s
            else:  # partial, switched, abandoned: the next turn has work at once
                pause = 0.0
            await self.sleep(pause)

    async def run_once(self, *, max_batches: int | None = None) -> Turn:
        """One turn of the worker (see the module docstring); ``max_batches`` stops a fill
        early (tests: a restart mid-fill)."""
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, row_factory=dict_row, options="-c statement_timeout=0"
        )
        async with conn:  # closing it releases the advisory lock
            await register_vector_async(conn)
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (REEMBED_LOCK,))
            if not (await cur.fetchone())["got"]:
                return "busy"
            target = await self._target(conn)
            if target is None:
                return "idle"
            try:
                if target.state == "active":  # settling after a switch
                    await self._repair(conn, target, bump=True)
                    return "settling" if await self._settling(conn, target.slug) else "settled"
                if not await self._fill(conn, target, max_batches):
                    return "partial"
                await self._repair(conn, target, bump=False)
                await self._switch(conn, target)
            except Abandoned:
                log.info("re-embed into %s abandoned (another model configured)", target.name)
                return "abandoned"
            return "switched"

    async def _target(self, conn: psycopg.AsyncConnection) -> ModelRow | None:
        rows = await models(conn)
        filling = next((r for r in rows if r.state == "filling"), None)
        if filling is not None:
            return filling
        for r in rows:
            if r.state == "active" and await self._settling(conn, r.slug):
                return r
        return None

    @staticmethod
    async def _settling(conn: psycopg.AsyncConnection, slug: str) -> bool:
        cur = await conn.execute(
            "SELECT settle_until > now() AS settling FROM embedding_models WHERE slug = %s", (slug,)
        )
        row = await cur.fetchone()
        return bool(row and row["settling"])

    # ------------------------------------------------------------ phases
    async def _fill(
        self, conn: psycopg.AsyncConnection, target: ModelRow, max_batches: int | None
    ) -> bool:
        """Embed everything after the cursor; False when stopped by ``max_batches``."""
        cursor, batches = target.cursor_seq, 0
        await conn.execute(
            "UPDATE embedding_models SET total = done + (SELECT count(*) FROM memory_items"
            " WHERE seq > cursor_seq) WHERE slug = %s",
            (target.slug,),
        )
        while True:
            if max_batches is not None and batches >= max_batches:
                return False
            rows = await self._batch(conn, cursor, None)
            if not rows:
                return True
            async with conn.transaction():
                n = await self._write(conn, target, rows, bump=False)
                cur = await conn.execute(
                    "UPDATE embedding_models SET cursor_seq = %(seq)s, done = done + %(n)s,"
                    " total = greatest(total, done + %(n)s), updated_at = now()"
                    " WHERE slug = %(slug)s AND state = 'filling' RETURNING done, total",
                    {"seq": rows[-1]["seq"], "n": n, "slug": target.slug},
                )
                progress = await cur.fetchone()
                if progress is None:
                    raise Abandoned(target.slug)
            cursor, batches = rows[-1]["seq"], batches + 1
            done, total = progress["done"], progress["total"]
            self.metrics.embedded(target.name, n, done / total if total else 1.0, total - done)

    async def _repair(self, conn: psycopg.AsyncConnection, target: ModelRow, *, bump: bool) -> int:
        """Embed again what was written since the watermark; move the watermark."""
        cur = await conn.execute(
            "SELECT now() - make_interval(secs => %(m)s) AS mark, synced_until"
            " FROM embedding_models WHERE slug = %(slug)s",
            {"m": float(self.s.margin_s), "slug": target.slug},
        )
        row = await cur.fetchone()
        if row is None:
            raise Abandoned(target.slug)
        mark, since = row["mark"], row["synced_until"]
        after, fixed = 0, 0
        while rows := await self._batch(conn, after, since):
            fixed += await self._write(conn, target, rows, bump=bump)
            after = rows[-1]["seq"]
        await conn.execute(
            "UPDATE embedding_models SET synced_until = %(mark)s,"
            " cursor_seq = greatest(cursor_seq, %(after)s), updated_at = now()"
            " WHERE slug = %(slug)s",
            {"mark": mark, "after": after, "slug": target.slug},
        )
        if fixed:
            log.info("re-embed repair: %d memories embedded again into %s", fixed, target.name)
        return fixed

    async def _switch(self, conn: psycopg.AsyncConnection, target: ModelRow) -> None:
        """The filled table serves from now on; the old one retires (one transaction)."""
        async with conn.transaction():
            cur = await conn.execute(
                "SELECT state FROM embedding_models WHERE slug = %s FOR UPDATE", (target.slug,)
            )
            row = await cur.fetchone()
            if row is None or row["state"] != "filling":
                raise Abandoned(target.slug)
            await conn.execute(
                "UPDATE embedding_models SET state = 'retired', retired_at = now(),"
                " settle_until = NULL, updated_at = now() WHERE state = 'active'"
            )
            await conn.execute(
                "UPDATE embedding_models SET state = 'active', activated_at = now(),"
                " settle_until = now() + make_interval(secs => %(s)s), total = done,"
                " updated_at = now() WHERE slug = %(slug)s",
                {"s": float(self.s.settle_s), "slug": target.slug},
            )
            await conn.execute("SELECT pg_notify(%s, %s)", (MODELS_CHANNEL, target.slug))
        self.metrics.embedded(target.name, 0, 1.0, 0)
        log.info("embedding model switched to %s", target.name)

    # ------------------------------------------------------------ one batch
    async def _batch(
        self, conn: psycopg.AsyncConnection, after: int, since: Any
    ) -> list[dict[str, Any]]:
        query = _BATCH_SQL.format(since="" if since is None else " AND updated_at >= %(since)s")
        cur = await conn.execute(query, {"after": after, "since": since, "n": self.s.batch})
        return await cur.fetchall()

    async def _write(
        self, conn: psycopg.AsyncConnection, target: ModelRow, rows: list[dict], *, bump: bool
    ) -> int:
        await self._pace(len(rows))
        vectors = np.asarray(await self.embed([r["content"] for r in rows], target.ref))
        if vectors.shape != (len(rows), target.dim):
            raise ValueError(f"{target.name} gave vectors of shape {vectors.shape}")
        cur = await conn.execute(
            _upsert(target.slug, bump),
            {
                "ids": [r["id"] for r in rows],
                "hs": [r["h"] for r in rows],
                "vecs": [v.astype(np.float32) for v in vectors],
                "channel": CHANGES_CHANNEL,
            },
        )
        return int((await cur.fetchone())["n"])

    async def _pace(self, n: int) -> None:
        """Token-bucket pacing: ``n`` texts may start once the previous ones' time is up."""
        if self.s.rate_per_s <= 0:
            return
        now = self.clock()
        wait = self._next_at - now
        if wait > 0:
            await self.sleep(wait)
        self._next_at = max(now, self._next_at) + n / self.s.rate_per_s
