-- Retrieval (issue 4): the owner key of every memory as a column, so a search can
-- cover a union of owners (the user, '@agent:<id>', '@org') with one indexed filter.
-- Same rule as serve_app.store.records.owner_key and the vector tables' owner column.
ALTER TABLE memory_items ADD COLUMN owner text GENERATED ALWAYS AS (
    CASE
        WHEN scope IN ('user', 'session') AND user_id IS NOT NULL THEN user_id
        WHEN scope = 'agent' THEN '@agent:' || coalesce(agent_id, '')
        ELSE '@org'
    END
) STORED;
CREATE INDEX memory_items_tenant_owner_idx ON memory_items (tenant_id, owner);
