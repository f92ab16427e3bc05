-- memserve schema v3 (issue 6): per-key rate limit override and key bookkeeping.
-- rate_limit_per_s NULL: the service default (MEMSERVE_RATE_LIMIT_PER_S).
ALTER TABLE api_keys
    ADD COLUMN rate_limit_per_s real CHECK (rate_limit_per_s IS NULL OR rate_limit_per_s > 0),
    ADD COLUMN created_by uuid;
-- Shared (agent / organisation) memories are looked up by id with user_id NULL.
CREATE INDEX memory_items_shared_idx ON memory_items (tenant_id, scope, created_at DESC, id DESC)
    WHERE user_id IS NULL;
