-- memserve schema v16 (issue 28): tenant rate limits take the floor API keys have (0 or
-- at least 0.001 work units per second; serve_app/tenant_settings.py). A rate stored before the
-- floor (1e-300 locked the tenant's keys out, 5e-324 made every request a 500) would no
-- longer validate when read, so it is removed here: the tenant falls back to the
-- environment's rate. Each such change is a new version with a history row (actor
-- 'migration:0016'), like any other change, and notifies the replicas.
DO $$
DECLARE
    r record;
    fixed jsonb;
    field text;
BEGIN
    FOR r IN SELECT tenant_id, settings, version FROM tenant_settings
             WHERE jsonb_typeof(settings -> 'rate_limits') = 'object' FOR UPDATE LOOP
        fixed := r.settings;
        FOREACH field IN ARRAY ARRAY['per_user_per_s', 'per_key_per_s'] LOOP
            IF jsonb_typeof(fixed -> 'rate_limits' -> field) = 'number'
               AND (fixed -> 'rate_limits' ->> field)::numeric > 0
               AND (fixed -> 'rate_limits' ->> field)::numeric < 0.001 THEN
                fixed := fixed #- ARRAY['rate_limits', field];
            END IF;
        END LOOP;
        IF fixed -> 'rate_limits' = '{}'::jsonb THEN
            fixed := fixed - 'rate_limits';
        END IF;
        IF fixed <> r.settings THEN
            UPDATE tenant_settings SET settings = fixed, version = version + 1,
                   updated_at = now(), updated_by = NULL
             WHERE tenant_id = r.tenant_id;
            INSERT INTO tenant_settings_history
                   (tenant_id, version, changed_by, actor, old_settings, new_settings)
            VALUES (r.tenant_id, r.version + 1, NULL, 'migration:0016', r.settings, fixed);
        END IF;
    END LOOP;
END $$;
