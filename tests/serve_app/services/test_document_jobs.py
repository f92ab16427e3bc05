"""Big documents as jobs (issue 33): DocumentService's accept and DocumentJobWorker over a
real PostgreSQL + pgvector (vectors from a deterministic stand-in for the Embedder): 202
after parse+chunk, refusals before anything is stored, the worker's swap, a dead
worker's job taken again, a forget racing the embedding, retries, isolation of job
reads, and mem0's several documents all or nothing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from serve_app.db.pool import open_pool
from serve_app.documents.chunking import load_tokenizer, sizes_for
from serve_app.documents.jobs import JobLost
from serve_app.errors import ApiError
from serve_app.schemas.documents import DocumentInput, DocumentJob, DocumentOut
from serve_app.services.document_jobs import DocumentJobWorker
from serve_app.services.documents import DocumentService
from serve_app.settings import DocumentSettings, Settings, get_settings
from serve_app.store import Owner, quota
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import GuardedWriter
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.test_documents import (
    ALICE,
    BOB,
    OTHER,
    SERVICE,
    chunk_rows,
    embed,
    handbook,
)
from tests.serve_app.store.unit_vectors import DIM


@pytest.fixture
async def pool(fresh_db):
    ensure_table(fresh_db, "test", DIM)
    pool = await open_pool(fresh_db, Settings(), min_size=1)
    await pool.wait()
    yield pool
    await pool.close()


def documents(pool, writer=None, embedder=embed, **settings) -> DocumentService:
    s = DocumentSettings(**{"embed_batch": 2, "sync_chunks": 4, **settings})
    model = get_settings().embed.model
    return DocumentService(
        pool,
        writer or GuardedWriter(pool, "test"),
        embedder,
        lambda: load_tokenizer(model),
        s,
        sizes_for(256, 512, 50, 8000),
    )


def worker(docs: DocumentService) -> DocumentJobWorker:
    return DocumentJobWorker(docs, docs.settings)


async def run_jobs(w: DocumentJobWorker) -> int:
    n = await w.run_once()
    await w.drain()
    return n


def notes(user: str = "alice", **kw) -> DocumentInput:
    body = "\n\n".join(f"## Day {i}\n\n" + f"note {i} " * 150 for i in range(6))
    return DocumentInput(
        document_id=f"{user}-notes",
        text=body,
        content_type="text/markdown",
        scope="user",
        user_id=user,
        **kw,
    )


async def job_rows(pool) -> list[dict]:
    async with pool.connection() as c:
        return await (await c.execute("SELECT * FROM document_jobs ORDER BY created_at")).fetchall()


async def test_a_big_post_is_a_job_the_worker_writes(pool):
    docs = documents(pool)
    job = await docs.ingest(SERVICE, handbook("v1"))  # six sections: over sync_chunks (4)
    DocumentJob.model_validate(job)  # the 202's shape
    assert job["status"] == "queued" and job["document_id"] == "handbook"
    assert job["chunk_count"] >= 6
    assert await chunk_rows(pool) == [] and await docs.store.head("t1", "handbook") is None
    [stored] = await job_rows(pool)
    assert len(stored["chunks"]) == job["chunk_count"]  # every chunk's text, durably

    w = worker(docs)
    assert await run_jobs(w) == 1
    assert w.counts == {"done": 1, "chunks": job["chunk_count"]}
    rows = await chunk_rows(pool)
    assert len(rows) == job["chunk_count"]
    assert [r["data"]["chunk_index"] for r in rows] == list(range(len(rows)))
    assert all(r["has_vector"] and r["data"]["version"] == 1 for r in rows)
    assert rows[0]["data"]["heading_path"][0] == "Handbook"
    done = await docs.job(ALICE, job["job_id"])  # a user key reads the org document's job
    assert (done["status"], done["version"], done["embedded"]) == ("done", 1, len(rows))
    assert (await job_rows(pool))[0]["chunks"] == []  # the text now lives in the chunks

    small = await docs.ingest(SERVICE, handbook("v2", paragraphs=2))
    assert isinstance(small, DocumentOut) and small.version == 2  # under the threshold: sync
    asked = await docs.ingest(SERVICE, handbook("v3", paragraphs=2), prefer_async=True)
    assert asked["status"] == "queued"
    behind = await docs.ingest(SERVICE, handbook("v4", paragraphs=2))
    assert isinstance(behind, dict)  # a job of the id is open: this post queues behind it
    await run_jobs(w)
    await run_jobs(w)
    assert (await docs.job(SERVICE, behind["job_id"]))["version"] == 4  # in order: last wins
    assert all("v4 rule" in r["content"] for r in await chunk_rows(pool))


async def test_refusals_come_before_the_202_and_store_nothing(pool):
    tight = GuardedWriter(pool, "test", memory_quota=quota.Quota(per_tenant=3))
    with pytest.raises(ApiError) as e:
        await documents(pool, tight).ingest(SERVICE, handbook("v1"))
    assert (e.value.status, e.value.code) == (403, "quota_exceeded")

    def out_of_units(units: float) -> None:
        raise ApiError(429, "rate_limited", f"{units} units")

    docs = documents(pool, jobs_per_tenant=1)
    with pytest.raises(ApiError) as e:
        await docs.ingest(SERVICE, handbook("v1"), charge=out_of_units)
    assert e.value.status == 429
    with pytest.raises(ApiError) as e:
        await docs.ingest(ALICE, handbook("v1"))  # a user key may not write org knowledge
    assert e.value.status == 403
    assert await job_rows(pool) == []

    await docs.ingest(SERVICE, handbook("v1"))
    with pytest.raises(ApiError) as e:  # the tenant's one open job is taken
        await docs.ingest(SERVICE, handbook("v1").model_copy(update={"document_id": "other"}))
    assert (e.value.status, e.value.code) == (429, "too_many_jobs")
    assert (await docs.ingest(OTHER, handbook("v1")))["status"] == "queued"  # per tenant
    await run_jobs(worker(docs))
    with pytest.raises(ApiError) as e:  # the id is the org's: bob may read, not replace it
        await docs.ingest(BOB, notes("bob").model_copy(update={"document_id": "handbook"}))
    assert e.value.status == 403
    assert len(await job_rows(pool)) == 2


async def test_job_reads_are_isolated_like_their_documents(pool):
    docs = documents(pool)
    job = await docs.ingest(ALICE, notes("alice"))
    assert (await docs.job(ALICE, job["job_id"]))["status"] == "queued"
    assert (await docs.job(SERVICE, job["job_id"]))["document_id"] == "alice-notes"
    for stranger in (BOB, OTHER):  # another user, another tenant's service key
        with pytest.raises(ApiError) as e:
            await docs.job(stranger, job["job_id"])
        assert e.value.status == 404


async def test_a_dead_workers_job_is_taken_again_and_its_late_write_is_refused(pool):
    docs = documents(pool)
    job = await docs.ingest(SERVICE, handbook("v1"))
    [dead] = await docs.jobs.claim(1, 0.3, 1)  # claimed by a worker that then dies
    w = worker(docs)
    assert await run_jobs(w) == 0  # its lease holds the job
    await asyncio.sleep(0.4)
    assert await run_jobs(w) == 1 and w.counts["done"] == 1
    assert (await docs.job(SERVICE, job["job_id"]))["attempts"] == 2

    chunks = (await docs._parsed(Owner("t1", None), handbook("zombie")))[1]
    head = {**dead["head"], "chunk_count": len(chunks)}
    vectors = await embed([c.text for c in chunks], is_query=False)
    with pytest.raises(JobLost):  # the dead worker wakes up and tries to write
        await docs._swap(
            SERVICE, Owner("t1", None), head, chunks, vectors, job=(dead["id"], dead["claim_token"])
        )
    rows = await chunk_rows(pool)
    assert {r["data"]["version"] for r in rows} == {1} and "zombie" not in rows[0]["content"]


async def test_a_forget_during_the_embedding_drops_the_job_and_writes_nothing(pool):
    forget = ForgetStore(pool, "test")
    calls = 0

    async def embed_then_forget(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 1:  # alice is forgotten while her document is being embedded
            counts = await forget.forget(Scope("t1", "alice"))
            assert counts["document_jobs"] == 1
        return await embed(texts, is_query=is_query)

    docs = documents(pool, embedder=embed_then_forget)
    job = await docs.ingest(ALICE, notes("alice"))
    w = worker(docs)
    assert await run_jobs(w) == 1 and w.counts == {"lost": 1}
    assert await chunk_rows(pool, document_id="alice-notes") == []
    assert await docs.store.head("t1", "alice-notes") is None
    with pytest.raises(ApiError):
        await docs.job(ALICE, job["job_id"])


async def test_transient_failures_are_retried_then_the_job_fails_clearly(pool):
    async def down(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
        raise ConnectionError("embedder unavailable")

    docs = documents(pool, embedder=down, job_retry_s=0.3, job_max_attempts=2)
    job = await docs.ingest(SERVICE, handbook("v1"))
    w = worker(docs)
    await run_jobs(w)
    state = await docs.job(SERVICE, job["job_id"])
    assert state["status"] == "running" and "embedder unavailable" in state["error"]
    assert await run_jobs(w) == 0  # it waits out its retry
    for _ in range(2):
        await asyncio.sleep(0.4)
        await run_jobs(w)
    state = await docs.job(SERVICE, job["job_id"])
    assert w.counts == {"retry": 2, "failed": 1}
    assert state["status"] == "failed" and "gave up after 2 attempts" in state["error"]
    assert await chunk_rows(pool) == []


async def test_a_quota_filled_meanwhile_fails_the_job_with_the_reason(pool):
    writer = GuardedWriter(pool, "test", memory_quota=quota.Quota(per_tenant=10))
    docs = documents(pool, writer, job_concurrency=1)  # one after the other
    first = await docs.ingest(SERVICE, handbook("v1"))  # each fits alone (6-7 chunks)
    second = await docs.ingest(SERVICE, handbook("v1").model_copy(update={"document_id": "b"}))
    await run_jobs(worker(docs))
    assert (await docs.job(SERVICE, first["job_id"]))["status"] == "done"
    failed = await docs.job(SERVICE, second["job_id"])
    assert failed["status"] == "failed" and failed["error"].startswith("quota_exceeded")
    assert await chunk_rows(pool, document_id="b") == []


async def test_delete_of_a_document_or_of_an_agents_set_drops_open_jobs(pool):
    docs = documents(pool)
    await docs.ingest(SERVICE, handbook("v1", paragraphs=2))
    job = await docs.ingest(SERVICE, handbook("v2"))  # a re-post, queued
    assert (await docs.delete(SERVICE, "handbook"))["deleted"]
    agent = DocumentInput(
        document_id="manual",
        text=handbook("a").text,
        scope="agent",
        agent_id="helper",
        content_type="text/markdown",
    )
    agents = await docs.ingest(SERVICE, agent)
    await docs.writer.delete_scope(Owner("t1", None), agent_id="helper")
    assert await run_jobs(worker(docs)) == 0
    assert await docs.store.head("t1", "handbook") is None
    for gone in (job, agents):
        with pytest.raises(ApiError):
            await docs.job(SERVICE, gone["job_id"])


async def test_several_documents_at_once_are_all_or_nothing(pool):
    writer = GuardedWriter(pool, "test", memory_quota=quota.Quota(per_tenant=10))
    docs = documents(pool, writer, sync_chunks=1000)
    one, two = handbook("v1"), handbook("v1").model_copy(update={"document_id": "b"})
    with pytest.raises(ApiError) as e:  # each fits alone; together they do not
        await docs.ingest_many(SERVICE, [one, two])
    assert e.value.code == "quota_exceeded"
    assert await chunk_rows(pool) == [] and await docs.store.head("t1", "handbook") is None

    small = handbook("v1", paragraphs=2)
    out = await docs.ingest_many(SERVICE, [small, small.model_copy(update={"document_id": "a"})])
    assert [d.document_id for d in out] == ["handbook", "a"]  # the input's order
    assert all(d.version == 1 for d in out)


async def test_a_stopping_worker_hands_its_job_back_at_once(pool):
    started, never = asyncio.Event(), asyncio.Event()

    async def slow(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
        started.set()
        await never.wait()  # the replica stops while a slice is being embedded
        raise AssertionError("not reached")

    docs = documents(pool, embedder=slow)
    job = await docs.ingest(SERVICE, handbook("v1"))
    w = worker(docs)
    assert await w.run_once() == 1
    await asyncio.wait_for(started.wait(), 10)
    await w.stop()
    assert w.running == 0
    [again] = await docs.jobs.claim(1, 60, 1)  # claimable now, not after its lease (120 s)
    assert str(again["id"]) == job["job_id"] and again["attempts"] == 2


async def test_every_document_embed_asks_for_the_bulk_lane(pool):
    """The worker's chunks, a synchronous post's and mem0's several documents all go
    through the Embedder's bulk lane (issue 33), so other tenants' writes go first."""
    lanes: list[bool] = []

    async def recording(texts, *, is_query: bool, bulk: bool = False) -> np.ndarray:
        lanes.append(bulk)
        return await embed(texts, is_query=is_query)

    docs = documents(pool, embedder=recording)
    await docs.ingest(SERVICE, handbook("v1"))  # a job: nothing embedded in the request
    assert lanes == []
    assert await run_jobs(worker(docs)) == 1
    assert len(lanes) >= 3 and all(lanes)  # embed_batch 2: several calls, each bulk
    lanes.clear()
    await docs.ingest(SERVICE, handbook("v2", paragraphs=2))  # synchronous
    small = handbook("s", paragraphs=2).model_copy(update={"document_id": "s"})
    await docs.ingest_many(SERVICE, [small])  # mem0's document messages
    assert len(lanes) >= 2 and all(lanes)
