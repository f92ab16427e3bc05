-- memserve schema v10: extraction that cannot be jammed, and consolidation (issue 13).

-- Claim tokens: a claim is (claimed_until, claim_token); only the holder of the
-- token may mark its turns extracted or release them, so an expired claim that
-- another replica took over is never finished twice.
-- dead_at: the batch failed extract_max_attempts times; kept (never purged) until an
-- admin retries it. retry_at: a failed batch waits (backoff) before the next attempt.
ALTER TABLE session_turns
    ADD COLUMN claim_token uuid,
    ADD COLUMN dead_at     timestamptz,
    ADD COLUMN retry_at    timestamptz;
CREATE INDEX session_turns_dead_idx ON session_turns (tenant_id, dead_at)
    WHERE dead_at IS NOT NULL;

-- Row version for optimistic concurrency (PATCH If-Match, merges): bumped by every update.
ALTER TABLE memory_items ADD COLUMN version integer NOT NULL DEFAULT 1;

-- Per-user consolidation bookkeeping: when it last ran and what it did.
CREATE TABLE consolidation_state (
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    last_run_at timestamptz,
    last_report jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant_id, user_id)
);
