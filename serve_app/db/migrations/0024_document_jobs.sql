-- memserve schema v24 (issue 33): big documents ingest as durable jobs.
--
-- A post whose chunk count exceeds MEMSERVE_DOC_SYNC_CHUNKS (or that sends
-- `Prefer: respond-async`) is parsed and chunked in the request, then stored here in
-- one transaction (the head fields and every chunk's text) and answered 202: an
-- acknowledged document is never lost. An Extractor replica claims a job with a lease
-- (claim_token, claimed_until; FOR UPDATE SKIP LOCKED, fair between tenants), embeds
-- its chunks through the Embedder in slices, and writes the version with the same
-- atomic swap as a synchronous post, marking the job done in that transaction.
-- A worker that dies leaves status 'running' with a lease that runs out: the job is
-- claimed again. Finished jobs keep their status (not their chunks) for a while.
CREATE TABLE document_jobs (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    document_id     text NOT NULL,
    owner           text NOT NULL,          -- the document's: '@org', '@agent:<id>', a user id
    key_id          text NOT NULL,          -- who posted it (rights are re-checked at the swap)
    role            text NOT NULL,
    caller_user_id  text,
    head            jsonb NOT NULL,         -- the document's head fields (title, scope, ...)
    chunks          jsonb NOT NULL,         -- [[index, text, char_start, char_end, [headings]]]
    chunk_count     integer NOT NULL,
    status          text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    embedded        integer NOT NULL DEFAULT 0,  -- chunks embedded so far (progress)
    claim_token     uuid,
    claimed_until   timestamptz,
    error           text,
    version         integer,                -- the document version it wrote (done)
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz
);
-- The open queue (claims, the per-tenant cap, a document's order).
CREATE INDEX document_jobs_open_idx ON document_jobs (tenant_id, document_id, created_at, id)
    WHERE status IN ('queued', 'running');
-- Erasure of an owner's jobs; pruning of finished ones.
CREATE INDEX document_jobs_owner_idx ON document_jobs (tenant_id, owner);
CREATE INDEX document_jobs_finished_idx ON document_jobs (finished_at)
    WHERE finished_at IS NOT NULL;
