"""Big documents as durable jobs: accepted in the request, written by a worker.

A synchronous post embeds every chunk inside the request; a 300-page PDF would hold it
for a minute. So a post of more than ``MEMSERVE_DOC_SYNC_CHUNKS`` chunks (or one that
sends ``Prefer: respond-async``, or a re-post of a document that has a job open) is
parsed and chunked in the request, checked as the write would be (the id's owner, the
caller's rate units, the chunk quota, a running forget, the tenant's open jobs:
``MEMSERVE_DOC_JOBS_PER_TENANT``) and stored with its chunks' text in one transaction
(:mod:`serve_app.store.document_jobs`); only then is it answered 202 with the job.
A refusal is a 4xx then, and nothing is stored.

:class:`DocumentJobWorker` runs in every Extractor replica (``deployments/extractor.py``),
next to extraction and webhook delivery: it claims jobs under a lease, fairly between
tenants, at most ``MEMSERVE_DOC_JOB_CONCURRENCY`` at once; embeds a job's chunks through
the Embedder's bulk lane in calls of ``MEMSERVE_DOC_EMBED_BATCH`` chunks (the Embedder
slices each call and runs a slice only when no interactive caller waits, so other
tenants' writes go first; each call renews the lease); and writes the version with the very swap
a synchronous post uses (``DocumentService._swap``), which marks the job done in the
same transaction. A refusal at the swap (the quota filled meanwhile, the id taken) fails
the job with its reason; a transient error (the Embedder, the database) leaves it to be
claimed again after ``MEMSERVE_DOC_JOB_RETRY_S``, up to ``MEMSERVE_DOC_JOB_MAX_ATTEMPTS``
claims; a worker that dies leaves a lease that runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from serve_app.auth import Principal
from serve_app.documents.jobs import JobLost, job_chunks
from serve_app.errors import ApiError
from serve_app.metrics import DocumentJobMetrics
from serve_app.periodic import Periodic
from serve_app.services.documents import DocumentService
from serve_app.settings import DocumentSettings
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.guarded import ForgetInProgress, ValidationError
from serve_app.store.quota import QuotaExceeded
from serve_app.store.records import Owner

log = logging.getLogger(__name__)
PRUNE_EVERY_S = 60.0  # how often a worker deletes finished jobs past their retention
RELEASE_S = 5.0  # a stopping worker's try to hand its job back (else its lease runs out)


class DocumentJobWorker:
    """Claims and runs document jobs in the background of an Extractor replica."""

    def __init__(
        self,
        documents: DocumentService,
        s: DocumentSettings,
        *,
        metrics: DocumentJobMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.documents = documents  # a model switch replaces it (its embed and table)
        self.store: DocumentJobStore = documents.jobs
        self.s = s
        self.clock = clock
        self.metrics = metrics or DocumentJobMetrics()
        self._lanes: set[asyncio.Task[None]] = set()
        self._pruned = float("-inf")
        self._periodic = Periodic(
            self.run_once, s.job_poll_s, log=log, failed="a document job round failed"
        )

    def start(self) -> DocumentJobWorker:
        self._periodic.start()
        return self

    @property
    def running(self) -> int:
        return len(self._lanes)

    async def run_once(self) -> int:
        """Claim jobs for the free lanes and start them; how many were claimed. A lane
        goes on claiming one job at a time until the queue has none for it."""
        if self.clock() - self._pruned >= PRUNE_EVERY_S:
            self._pruned = self.clock()
            await self.store.prune(self.s.job_retention_s)
        jobs = await self._claim(self.s.job_concurrency - len(self._lanes))
        for job in jobs:
            task = asyncio.get_running_loop().create_task(self._lane(job))
            self._lanes.add(task)
            task.add_done_callback(self._lanes.discard)
        return len(jobs)

    async def _lane(self, job: dict[str, Any] | None) -> None:
        while job is not None:
            try:
                await self.run(job)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one job's bookkeeping kill the lane's replica
                log.exception("document job %s failed", job["id"])
            claimed = await self._claim(1)
            job = claimed[0] if claimed else None

    async def _claim(self, n: int) -> list[dict[str, Any]]:
        return await self.store.claim(n, self.s.job_lease_s, self.s.job_tenant_concurrency)

    async def drain(self) -> None:
        """Wait for the running lanes (tests, shutdown)."""
        while self._lanes:
            await asyncio.gather(*list(self._lanes), return_exceptions=True)

    async def stop(self) -> None:
        await self._periodic.stop()
        lanes = list(self._lanes)
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)

    @property
    def counts(self) -> dict[str, int]:
        """Outcomes so far (and chunks written), as ``status()`` shows them."""
        return dict(self.metrics.counts)

    def _count(self, outcome: str, chunks: int = 0) -> str:
        self.metrics.outcome(outcome, chunks)
        return outcome

    async def run(self, job: dict[str, Any]) -> str:
        """Embed and write one claimed job; its outcome: done | failed | retry | lost."""
        job_id, token = job["id"], job["claim_token"]
        if job["attempts"] > self.s.job_max_attempts:
            await self.store.fail(
                job_id,
                token,
                f"gave up after {self.s.job_max_attempts} "
                "attempts (the worker failed or stopped each time)",
            )
            return self._count("failed")
        head, chunks = job["head"], await asyncio.to_thread(job_chunks, job["chunks_json"])
        caller = Principal(
            job["key_id"], job["tenant_id"], job["role"], user_id=job["caller_user_id"]
        )
        owner = Owner(job["tenant_id"], head["user_id"] if head["scope"] == "user" else None)
        try:
            vectors = await self._embed(job_id, token, [c.text for c in chunks])
            await self.documents._swap(caller, owner, head, chunks, vectors, job=(job_id, token))
        except JobLost:
            return self._count("lost")
        except ApiError as exc:  # the id is taken, or no longer the caller's to replace
            await self.store.fail(job_id, token, f"{exc.code}: {exc.message}")
            return self._count("failed")
        except (QuotaExceeded, ValidationError) as exc:
            code = "quota_exceeded" if isinstance(exc, QuotaExceeded) else "invalid_request"
            await self.store.fail(job_id, token, f"{code}: {exc}")
            return self._count("failed")
        except ForgetInProgress as exc:  # the forget drops the job, or it runs afterwards
            await self.store.release(
                job_id, token, self.s.job_retry_s, f"forget_in_progress: {exc}"
            )
            return self._count("retry")
        except asyncio.CancelledError:  # the replica stops: hand the job back at once
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.store.release(job_id, token, 0.0, "the worker stopped"), RELEASE_S
                )
            raise
        except Exception as exc:  # the Embedder or the database: claimed again later
            log.warning("document job %s: %r; retried in %ss", job_id, exc, self.s.job_retry_s)
            await self.store.release(job_id, token, self.s.job_retry_s, f"retrying: {exc!r}"[:500])
            return self._count("retry")
        return self._count("done", len(chunks))

    async def _embed(self, job_id: uuid.UUID, token: uuid.UUID, texts: list[str]) -> np.ndarray:
        """The document service's bulk-lane calls, the lease renewed after each (a job
        cancelled or taken over meanwhile stops here: :class:`JobLost`)."""

        async def renew(done: int) -> None:
            if not await self.store.renew(job_id, token, self.s.job_lease_s, done):
                raise JobLost(job_id)

        return await self.documents._embed(texts, renew)
