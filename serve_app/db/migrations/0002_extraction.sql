-- memserve schema v2: extraction bookkeeping (issue 5).
-- session_turns is the durable extraction queue: a turn with extracted_at NULL is
-- pending. A replica claims turns with a lease (claimed_until) so two extractor
-- replicas never work on the same turns and a crashed one releases them.
ALTER TABLE session_turns
    ADD COLUMN claimed_until    timestamptz,
    ADD COLUMN extract_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN extract_error    text,
    ADD COLUMN meta             jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX session_turns_pending_scan_idx ON session_turns (created_at)
    WHERE extracted_at IS NULL;
CREATE INDEX session_turns_uncompressed_idx ON session_turns (tenant_id, user_id, session_id, turn_index)
    WHERE compressed_at IS NULL;
CREATE INDEX session_turns_expires_idx ON session_turns (expires_at)
    WHERE expires_at IS NOT NULL;

-- Per-session trigger state: ended sessions are extracted (and summarised) in full.
CREATE TABLE session_state (
    tenant_id  text NOT NULL,
    user_id    text NOT NULL,
    session_id text NOT NULL,
    agent_id   text,
    ended_at   timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, session_id)
);

-- Facts history: a replaced fact stays as an inactive row that says when and by what.
ALTER TABLE facts
    ADD COLUMN superseded_at timestamptz,
    ADD COLUMN superseded_by uuid,
    ADD COLUMN session_id    text;
CREATE INDEX facts_history_idx ON facts (tenant_id, user_id, category, key, created_at);

-- Earlier wordings of a merged memory (normalised hashes) still count as duplicates.
CREATE INDEX memory_items_aliases_idx ON memory_items USING gin ((data -> 'aliases'));
