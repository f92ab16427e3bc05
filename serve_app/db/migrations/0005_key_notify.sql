-- memserve schema v5: API-key changes are broadcast so ingress replicas can cache
-- authenticated keys and still see a revocation (or any edit, whoever makes it,
-- even by hand in psql) within milliseconds. Payload: the key's hash, the cache key.
CREATE FUNCTION memserve_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memserve_keys', OLD.key_hash);
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_notify AFTER UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION memserve_key_changed();
