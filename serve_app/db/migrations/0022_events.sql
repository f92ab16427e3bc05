-- memserve schema v22 (issue 32): the event outbox (GET /v1/events).
--
-- Triggers write one row per change in the change's own transaction, so an event
-- exists iff its change committed, whichever producer made it (the GuardedWriter's
-- one-statement writes, extraction, consolidation, import, the facts routes).
-- The feed orders by (txid, id) and shows only events of transactions older than every
-- running one (txid < pg_snapshot_xmin): every event it will ever show later sorts after
-- what it showed already, so a cursor never skips a late commit.
CREATE TABLE memory_events (
    id          bigserial PRIMARY KEY,
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    event_id    uuid NOT NULL DEFAULT gen_random_uuid(),  -- stable across redeliveries
    tenant_id   text NOT NULL,
    type        text NOT NULL,
    user_id     text,
    agent_id    text,
    session_id  text,
    scope       text,
    memory_id   uuid,
    version     integer,
    history_id  bigint,          -- memory_history row it mirrors (decision/reason follow it)
    decision    text,            -- reconcile's decision (ADD, UPDATE, INVALIDATE, ...)
    reason      text,            -- the model's reason for it
    actor       text,
    content     text,            -- shown only when asked for; blanked when the memory goes
    data        jsonb,           -- small structured detail (fact category/key, counts)
    occurred_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX memory_events_feed_idx ON memory_events (tenant_id, txid, id);
CREATE INDEX memory_events_user_idx ON memory_events (tenant_id, user_id, txid, id);
CREATE INDEX memory_events_memory_idx ON memory_events (tenant_id, memory_id)
    WHERE memory_id IS NOT NULL;
CREATE INDEX memory_events_history_idx ON memory_events (history_id) WHERE history_id IS NOT NULL;
CREATE INDEX memory_events_age_idx ON memory_events (occurred_at);

-- A producer that must not emit (a forget's own deletes, an import's replayed history)
-- runs SET LOCAL memserve.events = 'off' in its transaction.
CREATE FUNCTION memserve_events_on() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('memserve.events', true), '') <> 'off'
$$;

-- Memory events mirror memory_history: ADD -> memory.added, INVALIDATE ->
-- memory.invalidated, DELETE -> memory.deleted, UPDATE/MERGE -> memory.archived when the
-- memory is archived after the statement, else memory.updated.
CREATE FUNCTION memserve_memory_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT memserve_events_on() THEN
        RETURN NULL;
    END IF;
    INSERT INTO memory_events (tenant_id, type, user_id, agent_id, session_id, scope,
                               memory_id, version, history_id, actor, content)
    SELECT h.tenant_id,
           CASE h.event
               WHEN 'ADD' THEN 'memory.added'
               WHEN 'INVALIDATE' THEN 'memory.invalidated'
               WHEN 'DELETE' THEN 'memory.deleted'
               ELSE CASE WHEN i.status = 'archived' THEN 'memory.archived'
                         ELSE 'memory.updated' END
           END,
           h.user_id, i.agent_id, i.session_id, i.scope, h.memory_id, i.version, h.id, h.actor,
           CASE WHEN h.event = 'DELETE' THEN NULL ELSE coalesce(h.new_content, i.content) END
    FROM added h LEFT JOIN memory_items i ON i.id = h.memory_id
    ORDER BY h.id;
    -- A deleted memory's earlier events lose their content, as its history does.
    UPDATE memory_events e SET content = NULL
    FROM added h
    WHERE h.event = 'DELETE' AND e.tenant_id = h.tenant_id AND e.memory_id = h.memory_id
      AND e.content IS NOT NULL;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_history_events AFTER INSERT ON memory_history
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memserve_memory_events();

-- Reconcile's why (history.annotate merges it into new_data right after the write).
CREATE FUNCTION memserve_memory_event_why() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_events SET decision = NEW.new_data ->> 'decision',
                             reason = left(NEW.new_data ->> 'reason', 2000)
    WHERE history_id = NEW.id;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_history_event_why AFTER UPDATE OF new_data ON memory_history
    FOR EACH ROW WHEN (NEW.new_data IS DISTINCT FROM OLD.new_data)
    EXECUTE FUNCTION memserve_memory_event_why();

-- fact.set for every new value (added or replacing), fact.deleted for every deleted
-- active value; a confirmation (same value) changes nothing a consumer sees.
CREATE FUNCTION memserve_fact_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT memserve_events_on() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_events (tenant_id, type, user_id, session_id, content, data)
        SELECT f.tenant_id, 'fact.set', f.user_id, f.session_id, f.value,
               jsonb_build_object('fact_id', f.id, 'category', f.category, 'key', f.key,
                                  'source', f.source, 'confidence', f.confidence)
        FROM changed f WHERE f.active ORDER BY f.created_at, f.id;
    ELSE
        INSERT INTO memory_events (tenant_id, type, user_id, session_id, data)
        SELECT f.tenant_id, 'fact.deleted', f.user_id, f.session_id,
               jsonb_build_object('fact_id', f.id, 'category', f.category, 'key', f.key)
        FROM changed f WHERE f.active ORDER BY f.created_at, f.id;
        -- a deleted fact's earlier events lose their content
        UPDATE memory_events e SET content = NULL
        FROM changed f
        WHERE e.tenant_id = f.tenant_id AND e.user_id = f.user_id AND e.type = 'fact.set'
          AND e.data ->> 'fact_id' = f.id::text AND e.content IS NOT NULL;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER facts_events_ins AFTER INSERT ON facts
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION memserve_fact_events();
CREATE TRIGGER facts_events_del AFTER DELETE ON facts
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION memserve_fact_events();

-- Webhook subscriptions and their deliveries. A dispatcher copies each subscription's
-- new feed events into deliveries (its cursor moves in the same transaction), then
-- sends them: at least once, in order per (subscription, owner). A delivery holds no
-- content: it is read from its event at send time, so a forget (which deletes the
-- events, and by cascade their deliveries) leaves nothing of the owner to send.
CREATE TABLE webhook_subscriptions (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id       text NOT NULL,
    url             text NOT NULL,
    types           text[] NOT NULL DEFAULT '{}',   -- empty: every type
    include_content boolean NOT NULL DEFAULT false,
    secret          text NOT NULL,                  -- whsec_...: shown once, signs bodies
    enabled         boolean NOT NULL DEFAULT true,
    cursor_txid     xid8 NOT NULL DEFAULT pg_snapshot_xmin(pg_current_snapshot()),
    cursor_id       bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_subscriptions_tenant_idx ON webhook_subscriptions (tenant_id, created_at);

CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    subscription_id uuid NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_row       bigint NOT NULL REFERENCES memory_events (id) ON DELETE CASCADE,
    owner           text NOT NULL,                  -- user_id/agent_id: the order key
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_at         timestamptz NOT NULL DEFAULT now(),  -- due, or claimed until
    last_status     integer,                        -- the receiver's HTTP status
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (subscription_id, owner, id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log_idx ON webhook_deliveries (subscription_id, id DESC);
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_row);

-- Extraction outcomes, one event per session and statement: extraction.completed (turns
-- stamped extracted), extraction.failed (dead-lettered), extraction.deferred (a failed
-- attempt backed off until retry_at). They ride on the turn updates' own transactions.
CREATE FUNCTION memserve_extraction_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT memserve_events_on() THEN
        RETURN NULL;
    END IF;
    INSERT INTO memory_events (tenant_id, type, user_id, agent_id, session_id, data)
    SELECT c.tenant_id, c.type, c.user_id, max(c.agent_id), c.session_id,
           jsonb_build_object('turns', count(*), 'attempts', max(c.extract_attempts),
                              'error', max(c.extract_error), 'retry_at', max(c.retry_at))
    FROM (
        SELECT n.tenant_id, n.user_id, n.agent_id, n.extract_attempts, n.extract_error,
               n.retry_at, coalesce(n.meta ->> 'session_id', n.session_id) AS session_id,
               CASE WHEN n.dead_at IS NOT NULL THEN 'extraction.failed'
                    WHEN n.extracted_at IS NOT NULL THEN 'extraction.completed'
                    ELSE 'extraction.deferred' END AS type
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE (o.extracted_at IS NULL AND n.extracted_at IS NOT NULL)
           OR (n.extracted_at IS NULL AND n.retry_at IS NOT NULL
               AND n.retry_at IS DISTINCT FROM o.retry_at
               AND n.extract_attempts > o.extract_attempts)
    ) c
    GROUP BY c.tenant_id, c.user_id, c.session_id, c.type
    ORDER BY c.tenant_id, c.user_id, c.session_id, c.type;
    RETURN NULL;
END $$;

CREATE TRIGGER session_turns_extraction_events AFTER UPDATE ON session_turns
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memserve_extraction_events();
