"""The document job queue (migration 0024, store/document_jobs.py) against a real
PostgreSQL: the per-tenant cap, claims under a lease, fairness between tenants, a
document's jobs in order, lease expiry, erasure and tenant isolation."""

from __future__ import annotations

import asyncio
import json

from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.vectors import ensure_table
from tests.serve_app.store.unit_vectors import DIM

CALLER = ("k-svc", "service", None)


async def enqueue(jobs: DocumentJobStore, tenant: str, doc: str, owner: str = "@org", cap=100):
    head = {"document_id": doc, "scope": "org", "user_id": None, "agent_id": None}
    chunks = json.dumps([[0, f"text of {doc}", 0, 10, ["T"]]])
    return await jobs.enqueue(tenant, doc, owner, CALLER, head, chunks, 1, cap=cap)


async def test_enqueue_stores_the_job_and_caps_open_jobs_per_tenant(pool):
    jobs = DocumentJobStore(pool)
    first = await enqueue(jobs, "t1", "a", cap=2)
    assert first["status"] == "queued" and first["chunk_count"] == 1 and first["attempts"] == 0
    assert await enqueue(jobs, "t1", "b", cap=2) is not None
    assert await enqueue(jobs, "t1", "c", cap=2) is None  # two open: the third is refused
    assert await enqueue(jobs, "t2", "c", cap=2) is not None  # another tenant's own cap
    assert await jobs.has_open("t1", "a") and not await jobs.has_open("t1", "c")

    got = await jobs.get("t1", first["job_id"])
    assert got["document_id"] == "a" and "chunks" not in got
    assert await jobs.get("t2", first["job_id"]) is None  # another tenant's job: missing

    [claimed] = await jobs.claim(1, 60, 100)  # finishing one frees a place
    async with pool.connection() as conn, conn.transaction():
        assert await jobs.hold(conn, claimed["id"], claimed["claim_token"])
        await jobs.done(conn, claimed["id"], 1)
    assert await enqueue(jobs, "t1", "c", cap=2) is not None


async def test_claims_are_fair_between_tenants(pool):
    jobs = DocumentJobStore(pool)
    for n in range(6):  # tenant "big" queued six PDFs first
        await enqueue(jobs, "big", f"pdf-{n}")
    await enqueue(jobs, "small", "one")
    await enqueue(jobs, "small", "two")
    order = []
    for _ in range(4):  # each claim while the earlier ones still run
        [job] = await jobs.claim(1, 60, 100)
        order.append((job["tenant_id"], job["document_id"]))
    # big's oldest first (both tenants' first turn, big's is older), then small's first
    # (big has one running), then alternating: small's two never wait behind big's six.
    assert order == [("big", "pdf-0"), ("small", "one"), ("big", "pdf-1"), ("small", "two")]
    rest = await jobs.claim(10, 60, 100)
    assert sorted(j["document_id"] for j in rest) == [f"pdf-{n}" for n in range(2, 6)]
    assert await jobs.claim(10, 60, 100) == []


async def test_a_documents_jobs_run_one_at_a_time_in_order(pool):
    jobs = DocumentJobStore(pool)
    first = await enqueue(jobs, "t1", "handbook")
    second = await enqueue(jobs, "t1", "handbook")
    claimed = await jobs.claim(10, 60, 100)
    assert [j["id"] for j in claimed] == [first["job_id"]]  # the later post waits
    assert await jobs.claim(10, 60, 100) == []
    assert await jobs.fail(claimed[0]["id"], claimed[0]["claim_token"], "boom")
    [after] = await jobs.claim(10, 60, 100)
    assert after["id"] == second["job_id"]
    assert (await jobs.get("t1", first["job_id"]))["status"] == "failed"


async def test_an_expired_lease_is_claimed_again_and_the_old_holder_is_shut_out(pool):
    jobs = DocumentJobStore(pool)
    job = await enqueue(jobs, "t1", "a")
    [dead] = await jobs.claim(1, 0.2, 100)  # a worker that dies after claiming
    assert dead["attempts"] == 1
    assert await jobs.claim(1, 60, 100) == []  # its lease holds the job
    await asyncio.sleep(0.3)
    [again] = await jobs.claim(1, 60, 100)
    assert again["id"] == job["job_id"] and again["attempts"] == 2
    assert again["claim_token"] != dead["claim_token"]
    # The old holder can neither renew, finish nor fail it.
    assert not await jobs.renew(dead["id"], dead["claim_token"], 60, 1)
    async with pool.connection() as conn, conn.transaction():
        assert not await jobs.hold(conn, dead["id"], dead["claim_token"])
    assert not await jobs.fail(dead["id"], dead["claim_token"], "late")
    assert await jobs.renew(again["id"], again["claim_token"], 60, 1)
    assert (await jobs.get("t1", job["job_id"]))["embedded"] == 1


async def test_a_released_job_waits_out_its_retry_then_is_claimed(pool):
    jobs = DocumentJobStore(pool)
    await enqueue(jobs, "t1", "a")
    [job] = await jobs.claim(1, 60, 100)
    assert await jobs.release(job["id"], job["claim_token"], 0.2, "embedder down")
    assert await jobs.claim(1, 60, 100) == []
    await asyncio.sleep(0.3)
    [again] = await jobs.claim(1, 60, 100)
    assert again["id"] == job["id"] and again["attempts"] == 2


async def test_forget_and_delete_drop_the_owners_jobs(fresh_db, pool):
    ensure_table(fresh_db, "test", DIM)
    jobs = DocumentJobStore(pool)
    mine = await enqueue(jobs, "t1", "alice-notes", owner="alice")
    bobs = await enqueue(jobs, "t1", "bob-notes", owner="bob")
    org = await enqueue(jobs, "t1", "handbook")
    other = await enqueue(jobs, "t2", "handbook")
    forget = ForgetStore(pool, "test")

    narrowed = await forget.forget(Scope("t1", "alice", agent_id="helper"))
    assert narrowed["document_jobs"] == 0  # an agent of hers: her documents stay
    counts = await forget.forget(Scope("t1", "alice"))
    assert counts["document_jobs"] == 1
    assert await jobs.get("t1", mine["job_id"]) is None
    assert await jobs.get("t1", bobs["job_id"]) is not None

    counts = await forget.forget(Scope("t1", None))  # the whole tenant
    assert counts["document_jobs"] == 2
    assert await jobs.get("t1", org["job_id"]) is None
    assert await jobs.get("t2", other["job_id"]) is not None  # not another tenant's


async def test_prune_deletes_only_old_finished_jobs(pool):
    jobs = DocumentJobStore(pool)
    await enqueue(jobs, "t1", "a")
    queued = await enqueue(jobs, "t1", "b")
    [job] = await jobs.claim(1, 60, 100)
    await jobs.fail(job["id"], job["claim_token"], "x")
    assert await jobs.prune(3600) == 0  # finished just now
    await asyncio.sleep(0.05)
    assert await jobs.prune(0.01) == 1
    assert await jobs.get("t1", job["id"]) is None
    assert await jobs.get("t1", queued["job_id"]) is not None


async def test_a_tenant_runs_at_most_its_cap_of_jobs(pool):
    jobs = DocumentJobStore(pool)
    for n in range(3):
        await enqueue(jobs, "big", f"pdf-{n}")
    claimed = await jobs.claim(5, 60, 1)  # one claim of several honours the cap too
    assert [j["document_id"] for j in claimed] == ["pdf-0"]
    assert await jobs.claim(5, 60, 1) == []  # the lanes stay free for another tenant
    await enqueue(jobs, "small", "one")
    assert [j["tenant_id"] for j in await jobs.claim(5, 60, 1)] == ["small"]
    assert [j["document_id"] for j in await jobs.claim(5, 60, 2)] == ["pdf-1"]  # cap 2


async def test_cancel_stops_an_open_job_and_shuts_its_holder_out(pool):
    jobs = DocumentJobStore(pool)
    queued = await enqueue(jobs, "t1", "a")
    assert await jobs.cancel("t2", queued["job_id"]) is None  # another tenant's: missing
    got = await jobs.cancel("t1", queued["job_id"])
    assert got["status"] == "cancelled" and got["finished_at"] is not None
    assert await jobs.claim(1, 60, 100) == []  # a cancelled job is never claimed
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT chunks FROM document_jobs")).fetchone()
    assert row["chunks"] == []  # the text goes with the cancel
    assert await jobs.cancel("t1", queued["job_id"]) is None  # not open any more

    await enqueue(jobs, "t1", "b")
    [running] = await jobs.claim(1, 60, 100)
    assert (await jobs.cancel("t1", running["id"]))["status"] == "cancelled"
    # Its worker can neither renew, swap, fail nor release it.
    assert not await jobs.renew(running["id"], running["claim_token"], 60, 1)
    async with pool.connection() as conn, conn.transaction():
        assert not await jobs.hold(conn, running["id"], running["claim_token"])
    assert not await jobs.fail(running["id"], running["claim_token"], "late")
    assert not await jobs.release(running["id"], running["claim_token"], 0.0, "late")
    assert (await jobs.get("t1", running["id"]))["status"] == "cancelled"
