"""``document_jobs`` (migration 0024): big document posts, queued durably until embedded.

The queue follows extraction's pattern (``store/turns.py``): a claim is a lease
(``claim_token``, ``claimed_until``) taken with ``FOR UPDATE SKIP LOCKED``, so replicas
never share a job and a dead worker's job is claimed again once its lease runs out;
only the holder of the token renews, finishes or fails it. The claim order is fair
between tenants: each tenant's open jobs are numbered oldest first, a tenant's running
jobs count ahead of its queue, and the lowest number goes first, so one tenant's
backlog of PDFs cannot hold the workers while another tenant's single document waits.
A document's jobs run one at a time, in the order they were accepted (only its oldest
open job is claimable), so the last post wins as in a synchronous re-post.

Every read carries ``tenant_id``: another tenant's job is a missing one.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

__all__ = ["JOB_COLUMNS", "DocumentJobStore"]

# What ``GET /v1/documents/jobs/{id}`` shows (never the chunks' text).
JOB_COLUMNS = (
    "id AS job_id, document_id, owner, status, chunk_count, embedded, attempts, error,"
    " version, created_at, started_at, finished_at"
)
_OPEN = "status IN ('queued', 'running')"
_CLAIMABLE = "(j.status = 'queued' OR (j.status = 'running' AND j.claimed_until < now()))"

_ENQUEUE = (
    "INSERT INTO document_jobs (tenant_id, document_id, owner, key_id, role, caller_user_id,"
    " head, chunks, chunk_count) SELECT %(t)s, %(d)s, %(owner)s, %(key)s, %(role)s, %(u)s,"
    " %(head)s, %(chunks)s::jsonb, %(n)s"
    f" WHERE (SELECT count(*) FROM document_jobs WHERE tenant_id = %(t)s AND {_OPEN}) < %(cap)s"
    f" RETURNING {JOB_COLUMNS}"
)

_CLAIM = f"""
WITH open AS (
    SELECT id, tenant_id, document_id, created_at, status, claim_token, claimed_until
    FROM document_jobs WHERE {_OPEN}
), firsts AS (  -- a document's oldest open job: its jobs run in order, one at a time
    SELECT DISTINCT ON (tenant_id, document_id) * FROM open
    ORDER BY tenant_id, document_id, created_at, id
), busy AS (
    SELECT tenant_id, count(*) AS n FROM open
    WHERE status = 'running' AND claim_token IS NOT NULL AND claimed_until >= now()
    GROUP BY tenant_id
), ready AS (
    SELECT f.id, f.created_at, coalesce(b.n, 0)
           + row_number() OVER (PARTITION BY f.tenant_id ORDER BY f.created_at, f.id) AS turn
    FROM firsts f LEFT JOIN busy b USING (tenant_id)
    WHERE f.status = 'queued' OR f.claimed_until < now()
), pick AS (  -- a tenant's turn past its cap waits (its running jobs count first)
    SELECT j.id FROM document_jobs j JOIN ready r ON r.id = j.id
    WHERE {_CLAIMABLE} AND r.turn <= %(cap)s
    ORDER BY r.turn, r.created_at, r.id LIMIT %(n)s
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE document_jobs j SET status = 'running', claim_token = gen_random_uuid(),
       claimed_until = now() + make_interval(secs => %(lease)s), attempts = j.attempts + 1,
       started_at = coalesce(j.started_at, now())
FROM pick WHERE j.id = pick.id
RETURNING j.id, j.tenant_id, j.document_id, j.owner, j.key_id, j.role, j.caller_user_id,
          j.head, j.chunks::text AS chunks_json, j.chunk_count, j.attempts, j.claim_token
"""


class DocumentJobStore:
    """The queue of document ingest jobs (accept, claim, lease, finish, erase)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ---------- accept (the Ingress) ----------

    async def enqueue(
        self,
        tenant_id: str,
        document_id: str,
        owner: str,
        caller: tuple[str, str, str | None],
        head: dict[str, Any],
        chunks_json: str,
        chunk_count: int,
        *,
        cap: int,
    ) -> dict[str, Any] | None:
        """Store the job (head, and every chunk's text as ``chunks_json``: a JSON array
        the caller serialised off the event loop) in one transaction; None when the
        tenant has ``cap`` open jobs already (the tenant's lock makes the count exact)."""
        key_id, role, user_id = caller
        params = {
            "t": tenant_id,
            "d": document_id,
            "owner": owner,
            "key": key_id,
            "role": role,
            "u": user_id,
            "head": Jsonb(head),
            "chunks": chunks_json,
            "n": chunk_count,
            "cap": cap,
        }
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%(t)s, 34))", {"t": tenant_id}
            )
            return await (await conn.execute(_ENQUEUE, params)).fetchone()

    async def has_open(self, tenant_id: str, document_id: str) -> bool:
        """The document has a job queued or running (a later post queues behind it)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT 1 FROM document_jobs WHERE tenant_id = %(t)s AND document_id = %(d)s"
                f" AND {_OPEN} LIMIT 1",
                {"t": tenant_id, "d": document_id},
            )
            return await cur.fetchone() is not None

    async def get(self, tenant_id: str, job_id: uuid.UUID) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {JOB_COLUMNS} FROM document_jobs WHERE tenant_id = %(t)s AND id = %(id)s",
                {"t": tenant_id, "id": job_id},
            )
            return await cur.fetchone()

    async def cancel(self, tenant_id: str, job_id: uuid.UUID) -> dict[str, Any] | None:
        """Cancel an open job (its chunks' text goes); None if it is not open. A swap
        under way holds the row: this waits for its commit and then finds it done."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE document_jobs SET status = 'cancelled', chunks = '[]'::jsonb,"
                " claim_token = NULL, claimed_until = NULL, finished_at = now()"
                f" WHERE tenant_id = %(t)s AND id = %(id)s AND {_OPEN}"
                f" RETURNING {JOB_COLUMNS}",
                {"t": tenant_id, "id": job_id},
            )
            return await cur.fetchone()

    # ---------- the worker (Extractor replicas) ----------

    async def claim(self, n: int, lease_s: float, tenant_cap: int) -> list[dict[str, Any]]:
        """Up to ``n`` jobs, fairly between tenants, each under a fresh token and lease
        (the chunks as JSON text, ``chunks_json``: parsed off the event loop); none of a
        tenant beyond ``tenant_cap`` running (across replicas, this claim's included),
        so one tenant's PDFs never hold every worker while another's wait. Two replicas
        claiming at the same moment may each see the same running count (one over)."""
        if n <= 0:
            return []
        params = {"n": n, "lease": float(lease_s), "cap": tenant_cap}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_CLAIM, params)
            return await cur.fetchall()

    async def renew(
        self, job_id: uuid.UUID, token: uuid.UUID, lease_s: float, embedded: int
    ) -> bool:
        """Extend the lease and record progress; False: the job is no longer ours (its
        lease ran out and another worker took it, or a forget or delete dropped it)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE document_jobs SET claimed_until = now() + make_interval(secs => %(l)s),"
                " embedded = %(e)s WHERE id = %(id)s AND claim_token = %(k)s"
                " AND status = 'running'",
                {"id": job_id, "k": token, "l": float(lease_s), "e": embedded},
            )
            return cur.rowcount == 1

    @staticmethod
    async def hold(conn: AsyncConnection, job_id: uuid.UUID, token: uuid.UUID) -> bool:
        """Lock the job in ``conn``'s transaction if still ours (the swap's first step: a
        forget or delete that drops it waits for the swap's commit, or wins and the swap
        writes nothing)."""
        cur = await conn.execute(
            "SELECT 1 FROM document_jobs WHERE id = %(id)s AND claim_token = %(k)s"
            " AND status = 'running' FOR UPDATE",
            {"id": job_id, "k": token},
        )
        return await cur.fetchone() is not None

    @staticmethod
    async def done(conn: AsyncConnection, job_id: uuid.UUID, version: int) -> None:
        """Mark the held job done in the swap's transaction (its chunks' text goes)."""
        await conn.execute(
            "UPDATE document_jobs SET status = 'done', version = %(v)s, embedded = chunk_count,"
            " chunks = '[]'::jsonb, claim_token = NULL, claimed_until = NULL, error = NULL,"
            " finished_at = now() WHERE id = %(id)s",
            {"id": job_id, "v": version},
        )

    async def fail(self, job_id: uuid.UUID, token: uuid.UUID | None, error: str) -> bool:
        """Mark the job failed with ``error`` (only under ``token``; None: any holder)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE document_jobs SET status = 'failed', error = %(err)s,"
                " chunks = '[]'::jsonb, claim_token = NULL, claimed_until = NULL,"
                " finished_at = now() WHERE id = %(id)s AND status = 'running'"
                " AND (%(k)s::uuid IS NULL OR claim_token = %(k)s)",
                {"id": job_id, "k": token, "err": error[:1000]},
            )
            return cur.rowcount == 1

    async def release(
        self, job_id: uuid.UUID, token: uuid.UUID, retry_s: float, error: str
    ) -> bool:
        """A transient failure: the job is claimable again after ``retry_s`` (counted
        by ``attempts`` at its next claim; the error is kept until it finishes)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE document_jobs SET claim_token = NULL, error = %(err)s,"
                " claimed_until = now() + make_interval(secs => %(r)s)"
                " WHERE id = %(id)s AND claim_token = %(k)s AND status = 'running'",
                {"id": job_id, "k": token, "r": float(retry_s), "err": error[:1000]},
            )
            return cur.rowcount == 1

    async def prune(self, retention_s: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` jobs finished more than ``retention_s`` ago."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM document_jobs WHERE id IN (SELECT id FROM document_jobs"
                " WHERE finished_at < now() - make_interval(secs => %(r)s) LIMIT %(n)s)",
                {"r": float(retention_s), "n": limit},
            )
            return cur.rowcount

    # ---------- erasure (forget, delete) ----------

    @staticmethod
    async def drop_owner(conn: AsyncConnection, tenant_id: str, owner: str | None) -> int:
        """Every job of ``owner``'s documents (None: the whole tenant's), open or not: a
        forget or an owner's delete-all drops them before it deletes the chunks."""
        cur = await conn.execute(
            "DELETE FROM document_jobs WHERE tenant_id = %(t)s"
            " AND (%(o)s::text IS NULL OR owner = %(o)s)",
            {"t": tenant_id, "o": owner},
        )
        return cur.rowcount

    @staticmethod
    async def drop_document(conn: AsyncConnection, tenant_id: str, document_id: str) -> int:
        """The document's open jobs (a delete of the document: none re-creates it)."""
        cur = await conn.execute(
            f"DELETE FROM document_jobs WHERE tenant_id = %(t)s AND document_id = %(d)s"
            f" AND {_OPEN}",
            {"t": tenant_id, "d": document_id},
        )
        return cur.rowcount
