-- memserve schema v13 (issue 22): memories know when they were true.
--
-- Event time next to record time. created_at/updated_at say when the row was written;
-- valid_from/valid_until say when what it states became and stopped being true.
-- valid_from NULL = unknown (reads fall back to created_at); valid_until NULL = still
-- valid. A retired memory is never deleted: it gets valid_until and stays for audits
-- (reads hide it unless include_invalidated / as_of ask for it).

-- When a turn was said (client-supplied or server time); the extraction prompt shows it.
ALTER TABLE session_turns ADD COLUMN occurred_at timestamptz NOT NULL DEFAULT now();
UPDATE session_turns SET occurred_at = created_at;

-- The supersession chain lives on the rows themselves so GET and history read it without
-- a join: supersedes = the ids this memory retired, superseded_by = the one that retired it.
ALTER TABLE memory_items
    ADD COLUMN valid_from    timestamptz,
    ADD COLUMN valid_until   timestamptz,
    ADD COLUMN supersedes    uuid[] NOT NULL DEFAULT '{}',
    ADD COLUMN superseded_by uuid;
-- Retired rows are few; this finds them per owner (audits, as_of) without a scan.
CREATE INDEX memory_items_retired_idx ON memory_items (tenant_id, owner, valid_until)
    WHERE valid_until IS NOT NULL;
CREATE INDEX memory_items_superseded_by_idx ON memory_items (superseded_by)
    WHERE superseded_by IS NOT NULL;

-- Facts keep key-based replacement (one active per key) and gain the same interval:
-- the replaced value's valid_until is its successor's valid_from.
ALTER TABLE facts
    ADD COLUMN valid_from  timestamptz,
    ADD COLUMN valid_until timestamptz;
UPDATE facts SET valid_until = superseded_at WHERE NOT active AND superseded_at IS NOT NULL;

-- A retirement is a history event of its own (supersedes, PATCH valid_until, and the
-- reconcile step's INVALIDATE decision).
ALTER TABLE memory_history DROP CONSTRAINT IF EXISTS memory_history_event_check;
ALTER TABLE memory_history ADD CONSTRAINT memory_history_event_check
    CHECK (event IN ('ADD', 'UPDATE', 'DELETE', 'MERGE', 'INVALIDATE'));
