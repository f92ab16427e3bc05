-- memserve schema v1: items, history, turns, facts, api keys (DESIGN §5).
-- Vector tables are per embedding model and created by serve_app.store.vectors
-- because their dimension depends on the configured model.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE memory_items (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL,
    user_id          text,
    agent_id         text,
    session_id       text,
    scope            text NOT NULL DEFAULT 'user'
                     CHECK (scope IN ('user', 'session', 'agent', 'org')),
    type             text NOT NULL,
    content          text NOT NULL,
    data             jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags             text[] NOT NULL DEFAULT '{}',
    metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
    importance       real NOT NULL DEFAULT 0.5,
    confidence       real NOT NULL DEFAULT 1.0,
    dedupe_hash      text NOT NULL,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    source           text NOT NULL DEFAULT 'api',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    last_accessed_at timestamptz,
    access_count     integer NOT NULL DEFAULT 0,
    expires_at       timestamptz,
    tsv              tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
CREATE INDEX memory_items_owner_idx ON memory_items (tenant_id, user_id, created_at DESC, id DESC);
CREATE INDEX memory_items_dedupe_idx ON memory_items (tenant_id, user_id, dedupe_hash);
CREATE INDEX memory_items_scope_idx ON memory_items (tenant_id, scope, agent_id);
CREATE INDEX memory_items_session_idx ON memory_items (tenant_id, user_id, session_id);
CREATE INDEX memory_items_tags_idx ON memory_items USING gin (tags);
CREATE INDEX memory_items_tsv_idx ON memory_items USING gin (tsv);
CREATE INDEX memory_items_expires_idx ON memory_items (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE memory_history (
    id           bigserial PRIMARY KEY,
    memory_id    uuid NOT NULL,
    tenant_id    text NOT NULL,
    user_id      text,
    event        text NOT NULL CHECK (event IN ('ADD', 'UPDATE', 'DELETE', 'MERGE')),
    old_content  text,
    new_content  text,
    old_data     jsonb,
    new_data     jsonb,
    actor        text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_history_memory_idx ON memory_history (tenant_id, memory_id, id);
CREATE INDEX memory_history_user_idx ON memory_history (tenant_id, user_id);

CREATE TABLE session_turns (
    id            bigserial PRIMARY KEY,
    tenant_id     text NOT NULL,
    user_id       text NOT NULL,
    session_id    text NOT NULL,
    agent_id      text,
    turn_index    integer NOT NULL,
    role          text NOT NULL,
    content       text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    extracted_at  timestamptz,
    compressed_at timestamptz,
    UNIQUE (tenant_id, user_id, session_id, turn_index)
);
CREATE INDEX session_turns_pending_idx ON session_turns (tenant_id, user_id, session_id)
    WHERE extracted_at IS NULL;

CREATE TABLE facts (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    user_id     text NOT NULL,
    category    text NOT NULL,
    key         text NOT NULL,
    value       text NOT NULL,
    confidence  real NOT NULL DEFAULT 1.0,
    importance  real NOT NULL DEFAULT 0.8,
    active      boolean NOT NULL DEFAULT true,
    source      text NOT NULL DEFAULT 'extraction',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX facts_one_active_idx ON facts (tenant_id, user_id, category, key) WHERE active;
CREATE INDEX facts_owner_idx ON facts (tenant_id, user_id, active);

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    tenant_id   text NOT NULL,
    role        text NOT NULL CHECK (role IN ('admin', 'service', 'user')),
    user_id     text,
    key_hash    text NOT NULL UNIQUE,
    prefix      text NOT NULL,
    name        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CHECK (role <> 'user' OR user_id IS NOT NULL)
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);

-- One counter per memory owner, bumped in every write transaction. Caches compare
-- it (and listen on the memserve_changes channel) so nothing stale is served.
CREATE TABLE memory_owner_versions (
    tenant_id  text NOT NULL,
    owner      text NOT NULL,
    version    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, owner)
);
