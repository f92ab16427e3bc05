-- memserve schema v7: abuse resistance.
-- 1. A new key's INSERT is broadcast too (payload 'new:<hash>'), so replicas forget a
--    cached "unknown key" (negative cache) as soon as the key exists.
CREATE OR REPLACE FUNCTION memserve_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('memserve_keys', 'new:' || NEW.key_hash);
    ELSE
        PERFORM pg_notify('memserve_keys', OLD.key_hash);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER api_keys_notify ON api_keys;
CREATE TRIGGER api_keys_notify AFTER INSERT OR UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION memserve_key_changed();

-- 2. Tenants that ever had a service key, however it was made: start-up mints a
--    bootstrap key only for a tenant that never had one (revoking every key must
--    not make the next start print a fresh one).
CREATE TABLE tenant_service_key_seen (
    tenant_id  text PRIMARY KEY,
    first_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO tenant_service_key_seen (tenant_id, first_at)
    SELECT tenant_id, min(created_at) FROM api_keys WHERE role = 'service' GROUP BY tenant_id;

CREATE FUNCTION memserve_service_key_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_service_key_seen (tenant_id) VALUES (NEW.tenant_id)
        ON CONFLICT (tenant_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_service_seen AFTER INSERT ON api_keys
    FOR EACH ROW WHEN (NEW.role = 'service') EXECUTE FUNCTION memserve_service_key_seen();

-- 3. What each key spent through the chat proxy, per day (queryable by operators and
--    by GET /v1/chat/usage).
CREATE TABLE chat_usage (
    key_id             uuid NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    tenant_id          text NOT NULL,
    day                date NOT NULL,
    requests           bigint NOT NULL DEFAULT 0,
    refused            bigint NOT NULL DEFAULT 0,
    prompt_tokens      bigint NOT NULL DEFAULT 0,
    completion_tokens  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);
CREATE INDEX chat_usage_tenant_idx ON chat_usage (tenant_id, day);
