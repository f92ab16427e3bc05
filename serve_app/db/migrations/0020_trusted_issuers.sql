-- memserve schema v20 (issue 30): end users sign in with their platform's tokens (JWT).
-- A tenant's trusted issuers live in its settings document (identity.issuers[]); this
-- table is their index, kept by a trigger in the settings change's own transaction:
-- issuer + audience select the tenant, so a pair belongs to one tenant only (a second
-- tenant's change that names it fails on the primary key and changes nothing).
CREATE TABLE trusted_issuers (
    issuer      text NOT NULL,
    audience    text NOT NULL,
    tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    advertised  boolean NOT NULL DEFAULT false,  -- listed for MCP sign-in (RFC 9728)
    PRIMARY KEY (issuer, audience)
);
CREATE INDEX trusted_issuers_tenant_idx ON trusted_issuers (tenant_id);

CREATE FUNCTION memserve_trusted_issuers_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM trusted_issuers WHERE tenant_id = OLD.tenant_id;
    END IF;
    IF TG_OP <> 'DELETE' AND jsonb_typeof(NEW.settings -> 'identity' -> 'issuers') = 'array' THEN
        INSERT INTO trusted_issuers (issuer, audience, tenant_id, advertised)
        SELECT i ->> 'issuer', a, NEW.tenant_id, COALESCE((i ->> 'advertise')::boolean, false)
        FROM jsonb_array_elements(NEW.settings -> 'identity' -> 'issuers') AS i,
             jsonb_array_elements_text(i -> 'audiences') AS a;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tenant_settings_issuers AFTER INSERT OR UPDATE OR DELETE ON tenant_settings
    FOR EACH ROW EXECUTE FUNCTION memserve_trusted_issuers_sync();
