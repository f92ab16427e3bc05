-- memserve schema v12 (issue 24 item 3): tenants are first-class. Each tenant may
-- override the environment's defaults (quotas, retention, rate limits, chat models,
-- extraction guidance); an absent key means "the environment's value". Every change
-- is kept in tenant_settings_history (who, when, old and new), and broadcast on
-- memserve_tenants so every replica's cached copy is dropped at once.
CREATE TABLE tenants (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Tenants that exist today only as a string on their keys.
INSERT INTO tenants (id) SELECT DISTINCT tenant_id FROM api_keys ON CONFLICT DO NOTHING;

CREATE TABLE tenant_settings (
    tenant_id   text PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    settings    jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(settings) = 'object'),
    version     bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    updated_by  uuid  -- api_keys.id of the admin key; NULL: the operator's CLI
);

CREATE TABLE tenant_settings_history (
    id          bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    version     bigint NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  uuid,
    actor       text NOT NULL,  -- 'admin:<key id>', or 'cli' (python -m serve_app)
    old_settings jsonb NOT NULL,
    new_settings jsonb NOT NULL
);
CREATE INDEX tenant_settings_history_idx ON tenant_settings_history (tenant_id, id DESC);

CREATE FUNCTION memserve_tenant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memserve_tenants', COALESCE(NEW.tenant_id, OLD.tenant_id));
    RETURN NULL;
END $$;

CREATE TRIGGER tenant_settings_notify AFTER INSERT OR UPDATE OR DELETE ON tenant_settings
    FOR EACH ROW EXECUTE FUNCTION memserve_tenant_changed();
