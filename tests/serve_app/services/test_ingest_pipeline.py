"""A pipelined batch add (services/ingest_pipeline.py) on real PostgreSQL with the real
encoder: the same rows, order and errors as the single statement, chunk 2 embedding
while chunk 1 inserts, and all or nothing under a failing embed, a quota the second
chunk breaks, a supersede refused late, a forget racing in between and cancellation."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

import numpy as np
import pytest

from serve_app.errors import ApiError
from serve_app.metrics import IngestMetrics
from serve_app.services.ingest_pipeline import IngestPipeline
from serve_app.services.memories import MemoryService
from serve_app.store import NewMemory, Owner
from serve_app.store.erasure import Erasure
from serve_app.store.guarded import GuardedWriter
from serve_app.store.quota import Quota
from serve_app.store.vectors import ensure_table, table_name
from serve_app.testing.metrics_sink import Recorder

SLUG, DIM, CHUNK = "minilm", 384, 32
A, B = Owner("t1", "ann"), Owner("t1", "bob")
Hook = Callable[[int], Awaitable[None]]


class Log:
    """What happened, in order: ("embed", k) when embed call k starts, ("inserted", n)
    when a writer add of n items returns."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []


class Embedder:
    """The real encoder (off the event loop, as a Ray call would be), recording calls;
    ``hook(k)`` runs at the start of call k (a failure, a forget, a pause)."""

    def __init__(self, encoder, log: Log, hook: Hook | None = None) -> None:
        self.encoder, self.log, self.hook = encoder, log, hook
        self.sizes: list[int] = []

    async def __call__(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        k = len(self.sizes)
        self.sizes.append(len(texts))
        self.log.events.append(("embed", k))
        if self.hook is not None:
            await self.hook(k)
        return await asyncio.to_thread(self.encoder.encode, list(texts), is_query=is_query)


class TimedWriter(GuardedWriter):
    log: Log
    after: Callable[[Owner], Awaitable[None]] | None = None  # runs after each insert

    async def add(self, owner, items, embeddings, **kw):  # type: ignore[override]
        rows = await super().add(owner, items, embeddings, **kw)
        self.log.events.append(("inserted", len(items)))
        if self.after is not None:
            await self.after(owner)
        return rows


async def no_search(_queries):  # these tests never search
    raise AssertionError("unexpected search")


@pytest.fixture
async def pool(fresh_db):
    from serve_app.db.pool import open_pool
    from serve_app.settings import Settings

    ensure_table(fresh_db, SLUG, DIM)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield pool
    await pool.close()


@pytest.fixture
def make(pool, encoder):
    """A MemoryService with ``chunk`` (0: the single statement), its log and embedder."""

    def build(
        chunk: int,
        hook: Hook | None = None,
        max_open: int = 4,
        metrics: IngestMetrics | None = None,
        **writer_kw,
    ) -> tuple[MemoryService, Log, Embedder]:
        log = Log()
        writer = TimedWriter(pool, SLUG, **writer_kw)
        writer.log = log
        embed = Embedder(encoder, log, hook)
        pipeline = IngestPipeline(writer, embed, chunk, max_open=max_open, metrics=metrics)
        service = MemoryService(writer, embed, no_search, session_ttl_s=0, pipeline=pipeline)
        return service, log, embed

    return build


def batch(n: int, **kw) -> list[NewMemory]:
    kinds = ("semantic", "episodic", "procedural")
    return [
        NewMemory(
            f"note {i}: the user likes topic {i % 7} on day {i}",
            type=kinds[i % 3],
            scope="session" if i % 5 == 0 else "user",
            session_id=f"s{i % 2}" if i % 5 == 0 else None,
            tags=[f"t{i % 4}"],
            metadata={"i": i},
            importance=(i % 10) / 10,
            **kw,
        )
        for i in range(n)
    ]


async def rows_of(pool, owner: Owner) -> list[dict]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT i.*, v.embedding, i.valid_until IS NULL AS valid, (SELECT array_agg(h.event"
            " ORDER BY h.id) FROM memory_history h WHERE h.memory_id = i.id) AS events"
            " FROM memory_items i"
            f" JOIN {table_name(SLUG)} v ON v.item_id = i.id"
            " WHERE i.tenant_id = %s AND i.user_id = %s ORDER BY i.seq",
            (owner.tenant_id, owner.user_id),
        )
        return await cur.fetchall()


async def stored(pool) -> dict[str, int]:
    async with pool.connection() as conn:
        out = {}
        for table in ("memory_items", table_name(SLUG), "memory_history"):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")
            out[table] = (await cur.fetchone())["n"]
        cur = await conn.execute("SELECT coalesce(sum(n), 0) AS n FROM memory_counts")
        out["memory_counts"] = (await cur.fetchone())["n"]
        return out


async def counted(pool) -> dict[str, int]:
    """memory_counts per owner key ('' the tenant); must match the rows stored."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT owner, n FROM memory_counts WHERE n > 0")
        counts = {r["owner"]: r["n"] for r in await cur.fetchall()}
        cur = await conn.execute("SELECT owner, count(*) AS n FROM memory_items GROUP BY owner")
        rows = {r["owner"]: r["n"] for r in await cur.fetchall()}
    assert counts == {**rows, "": sum(rows.values())} if rows else counts == {}
    return counts


SAME = (
    "agent_id",
    "session_id",
    "scope",
    "type",
    "content",
    "tags",
    "metadata",
    "importance",
    "status",
    "version",
    "valid_from",
    "valid",
    "events",
)


async def test_pipelined_rows_equal_the_single_statements_in_input_order(make, pool):
    plain, _, plain_embed = make(0)
    piped, log, piped_embed = make(CHUNK)
    old = {o: (await plain.add(o, [NewMemory("an old view")], "t"))[0] for o in (A, B)}
    items, returned = batch(70), {}
    for o, service in ((A, plain), (B, piped)):
        mine = list(items)
        mine[40] = NewMemory("a new view", supersedes=[old[o]["id"]])
        returned[o] = await service.add(o, mine, "t")
        assert [r["content"] for r in returned[o]] == [i.content for i in mine]
    assert plain_embed.sizes == [1, 1, 70] and piped_embed.sizes == [32, 32, 6]
    a, b = await rows_of(pool, A), await rows_of(pool, B)
    assert len(a) == len(b) == 71
    for x, y in zip(a, b, strict=True):
        assert {k: x[k] for k in SAME} == {k: y[k] for k in SAME}
        assert float(np.dot(x["embedding"].to_numpy(), y["embedding"].to_numpy())) > 0.999
    assert [r["id"] for r in returned[B]] == [r["id"] for r in b[1:]]  # seq: input order
    retired = [r for r in b if r["valid_until"] is not None]
    assert [r["content"] for r in retired] == ["an old view"]
    assert retired[0]["superseded_by"] == returned[B][40]["id"]
    counts = await counted(pool)  # counted once before the commit, as the trigger would
    assert counts["ann"] == counts["bob"] == 71 and counts[""] == 142


async def test_chunk_2_embeds_while_chunk_1_inserts(make):
    service, log, embed = make(CHUNK)
    await service.add(A, batch(70), "t")
    assert embed.sizes == [32, 32, 6]
    inserted = [n for n, e in enumerate(log.events) if e[0] == "inserted"]
    assert len(inserted) == 3
    assert log.events.index(("embed", 1)) < inserted[0]  # began before chunk 1 was in
    assert log.events.index(("embed", 2)) < inserted[1]


async def test_retention_is_applied_once_for_the_whole_batch(make, pool):
    async def retention(_tenant: str) -> dict[str, float]:
        return {"episodic": 3600}

    service, _, _ = make(CHUNK, retention=retention)
    await service.add(A, batch(70), "t")
    rows = await rows_of(pool, A)
    expiries = {r["expires_at"] for r in rows if r["type"] == "episodic"}
    assert len(expiries) == 1 and {r["expires_at"] for r in rows if r["type"] != "episodic"} == {
        None
    }
    assert next(iter(expiries)) - rows[0]["created_at"] < timedelta(seconds=3601)


async def test_a_failing_embed_of_chunk_2_writes_nothing(make, pool):
    async def fail(k: int) -> None:
        if k == 1:
            raise RuntimeError("embedder replica died")

    service, log, _ = make(CHUNK, fail)
    before = await stored(pool)
    with pytest.raises(RuntimeError, match="embedder replica died"):
        await service.add(A, batch(70), "t")
    assert ("inserted", 32) in log.events  # chunk 1 was in, then rolled back
    assert await stored(pool) == before


async def test_a_quota_the_second_chunk_breaks_writes_nothing_and_reads_as_today(make, pool):
    errors = {}
    for chunk, owner in ((0, A), (CHUNK, B)):
        service, log, _ = make(chunk, memory_quota=Quota(per_user=68))
        await service.add(owner, batch(5), "t")
        before = await stored(pool)
        with pytest.raises(ApiError) as exc:
            await service.add(owner, batch(64), "t")
        errors[chunk] = (exc.value.status, exc.value.code, exc.value.message)
        assert await stored(pool) == before
    assert errors[0] == errors[CHUNK] == (403, "quota_exceeded", errors[0][2])
    assert "(5 stored)" in errors[CHUNK][2]  # not the rolled-back first chunk's 37
    assert ("inserted", 32) in log.events


async def test_a_batch_that_exactly_fills_the_quota_passes(make, pool):
    service, _, _ = make(CHUNK, memory_quota=Quota(per_user=69, per_tenant=69))
    await service.add(A, batch(5), "t")
    assert len(await service.add(A, batch(64), "t")) == 64
    assert (await counted(pool))[""] == 69
    with pytest.raises(ApiError, match=r"quota \(69\) is reached \(69 stored\)"):
        await service.add(A, batch(40), "t")


async def test_a_supersede_refused_in_a_later_chunk_writes_nothing(make, pool):
    errors = {}
    for chunk, owner in ((0, A), (CHUNK, B)):
        service, _, _ = make(chunk)
        items = batch(70)
        items[50] = NewMemory("retires nothing", supersedes=[uuid.UUID(int=7)])
        with pytest.raises(ApiError) as exc:
            await service.add(owner, items, "t")
        errors[chunk] = (exc.value.status, exc.value.message)
    assert errors[0] == errors[CHUNK] and errors[0][0] == 404
    assert (await stored(pool))["memory_items"] == 0


async def test_errors_before_any_write_name_the_batchs_items(make, pool):
    for chunk in (0, CHUNK):
        service, _, embed = make(chunk)
        items = batch(70)
        items[40] = NewMemory("bad\x00content")
        with pytest.raises(ApiError, match="item 40"):
            await service.add(A, items, "t")
        same = batch(70)
        same[3] = NewMemory("x", supersedes=[uuid.UUID(int=1)])
        same[60] = NewMemory("y", supersedes=[uuid.UUID(int=1)])  # another chunk
        with pytest.raises(ApiError, match="superseded only once") as exc:
            await service.add(A, same, "t")
        assert exc.value.status == 422
    assert (await stored(pool))["memory_items"] == 0


@pytest.mark.parametrize("session", [None, "s0"])
async def test_a_forget_starting_between_chunks_voids_the_batch(make, pool, session):
    """A forget of the user (later chunks' guard refuses them) or of session s0, whose
    items are all in chunk 1 (only the whole-batch guard before the commit sees it)."""

    async def forget(k: int) -> None:
        if k == 2:  # chunk 3's embed: chunk 1 is in, chunk 2 inserting
            async with pool.connection() as conn:
                await Erasure.start(conn, "t1", "ann", session_id=session, lease_s=60)

    service, log, _ = make(CHUNK, forget)
    items = batch(70)
    for n, item in enumerate(items):  # s0 only in chunk 1
        if item.session_id == "s0" and n >= CHUNK:
            items[n] = NewMemory(item.content)
    assert any(i.session_id == "s0" for i in items[:CHUNK])
    before = await stored(pool)
    with pytest.raises(ApiError) as exc:
        await service.add(A, items, "t")
    assert (exc.value.status, exc.value.code) == (409, "forget_in_progress")
    assert ("inserted", 32) in log.events
    assert await stored(pool) == before


async def test_a_cancelled_request_writes_nothing(make, pool):
    gate = asyncio.Event()

    async def hold(k: int) -> None:
        if k == 1:
            await gate.wait()

    service, log, _ = make(CHUNK, hold)
    task = asyncio.create_task(service.add(A, batch(70), "t"))
    while ("inserted", 32) not in log.events:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await stored(pool) == {k: 0 for k in await stored(pool)}
    assert len(await service.add(A, batch(3), "t")) == 3  # the pool still serves
    assert (await counted(pool))[""] == 3  # and counts again (defer_counts was LOCAL)


async def test_other_writes_of_the_tenant_do_not_wait_and_max_open_holds(make, pool):
    """While a batch is pipelined (its later chunks embedding) another user of the same
    tenant writes at once: the tenant's count row is not locked until the commit. Each
    pipelined batch holds a connection: past ``max_open`` at once, a batch is embedded
    whole and inserted in one statement instead."""
    gate = asyncio.Event()

    async def hold(k: int) -> None:
        if k == 1:  # the first batch's second chunk waits for the second batch
            await gate.wait()

    metrics, sink = IngestMetrics(), Recorder()
    metrics.flusher.sink = sink
    service, _, embed = make(CHUNK, hold, max_open=1, metrics=metrics)
    first = asyncio.create_task(service.add(A, batch(70), "t"))
    while len(embed.sizes) < 2:
        await asyncio.sleep(0.01)
    assert len(await service.add(B, batch(70), "t")) == 70
    gate.set()
    assert len(await first) == 70
    assert embed.sizes == [32, 32, 70, 6] and service.pipeline.open == 0
    assert len(await rows_of(pool, A)) == len(await rows_of(pool, B)) == 70
    assert (await counted(pool))[""] == 140
    await service.add(A, batch(CHUNK), "t")  # one chunk: neither path is counted
    await metrics.flusher.stop()
    assert sink.counters == {
        ("memserve_ingest_batches", ("pipelined",)): 1,
        ("memserve_ingest_batches", ("single",)): 1,
    }
    assert sink.observations == [("memserve_ingest_pipelines_open", (), 0, 1)]


async def test_two_batches_filling_a_tenant_together_cannot_overshoot_its_quota(make, pool):
    """Two users' batches pipelined at once, each past its last chunk's tenant gate before
    either commits (the other's rows are not counted until its commit): counting at the
    commit must see the first commit's rows and refuse the second batch whole."""
    both, inserts, waiting = asyncio.Event(), Counter(), 0

    async def after(owner: Owner) -> None:
        nonlocal waiting
        inserts[owner] += 1
        if inserts[owner] == 2:  # a batch's last chunk is in: wait for the other's
            waiting += 1
            if waiting == 2:
                both.set()
            await both.wait()

    service, _, _ = make(CHUNK, max_open=2, memory_quota=Quota(per_tenant=100))
    service.writer.after = after
    done = await asyncio.gather(
        service.add(A, batch(64), "t"), service.add(B, batch(64), "t"), return_exceptions=True
    )
    refused = [d for d in done if isinstance(d, ApiError)]
    assert len(refused) == 1 and (refused[0].status, refused[0].code) == (403, "quota_exceeded")
    assert "tenant memory quota (100)" in refused[0].message
    assert sorted(len(d) for d in done if isinstance(d, list)) == [64]
    assert (await counted(pool))[""] == 64
