-- A pipelined batch add (serve_app/services/ingest_pipeline.py) inserts in several
-- statements of one transaction while later chunks are still being embedded. Counting
-- each statement would lock the tenant's memory_counts row from the first chunk to the
-- commit, so every other write of the tenant would wait for the batch's embedding.
-- With memserve.defer_counts on (SET LOCAL, that transaction only) inserts are not
-- counted here; the batch counts all its rows in one statement just before it commits
-- (serve_app/store/quota.py: count_added).
CREATE OR REPLACE FUNCTION memserve_count_items() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' AND current_setting('memserve.defer_counts', true) = 'on' THEN
        RETURN NULL;
    END IF;
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
