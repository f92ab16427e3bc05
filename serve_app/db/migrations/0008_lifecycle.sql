-- memserve schema v8 (issue 12): forget, expiry, access tracking, quotas.

-- One row per forget (erasure request). Extraction work that began before a forget of
-- its owner finished writes nothing (serve_app.store.erasure guards its inserts with
-- this table in the same statement). agent_id/session_id '' means "any".
CREATE TABLE memory_erasures (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text,            -- NULL: the whole tenant
    agent_id    text NOT NULL DEFAULT '',
    session_id  text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX memory_erasures_owner_idx ON memory_erasures (tenant_id, user_id);

-- Memory counts per (tenant, owner) and per tenant (owner ''), kept by statement-level
-- triggers, so a quota check is one indexed read however many memories exist.
CREATE TABLE memory_counts (
    tenant_id text NOT NULL,
    owner     text NOT NULL,
    n         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, owner)
);

CREATE FUNCTION memserve_count_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One ordered upsert for both operations: rows are locked in key order (no deadlock).
    INSERT INTO memory_counts (tenant_id, owner, n)
    SELECT d.tenant_id, d.owner, d.n * CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END FROM (
        SELECT tenant_id, owner, count(*) AS n FROM changed GROUP BY tenant_id, owner
        UNION ALL
        SELECT tenant_id, '', count(*) FROM changed GROUP BY tenant_id
    ) d ORDER BY d.tenant_id, d.owner
    ON CONFLICT (tenant_id, owner) DO UPDATE SET n = greatest(memory_counts.n + excluded.n, 0);
    RETURN NULL;
END $$;

CREATE TRIGGER memory_items_count_ins AFTER INSERT ON memory_items
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION memserve_count_items();
CREATE TRIGGER memory_items_count_del AFTER DELETE ON memory_items
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION memserve_count_items();

INSERT INTO memory_counts (tenant_id, owner, n)
SELECT tenant_id, owner, count(*) FROM memory_items GROUP BY tenant_id, owner
UNION ALL
SELECT tenant_id, '', count(*) FROM memory_items GROUP BY tenant_id;
