-- memserve schema v9: the registry of embedding models' vector tables, so a model change
-- re-embeds existing memories into the new model's table in the background instead of
-- starting from an empty one (serve_app/store/model_registry.py, serve_app/reembed/).
-- One row per memory_vectors_<slug> table: 'active' serves search and dedup (exactly one),
-- 'filling' is being re-embedded (its cursor survives restarts), 'retired' is an old table
-- an admin may drop. Rows are written by the start-up work and the re-embed worker.
CREATE TABLE embedding_models (
    slug          text PRIMARY KEY,          -- memory_vectors_<slug>
    ref           text NOT NULL,             -- the MEMSERVE_EMBED_MODEL value that loads it
    name          text NOT NULL,             -- spec name
    dim           integer NOT NULL CHECK (dim > 0),
    state         text NOT NULL CHECK (state IN ('active', 'filling', 'retired')),
    cursor_seq    bigint NOT NULL DEFAULT 0, -- fill: memory_items.seq embedded up to
    done          bigint NOT NULL DEFAULT 0, -- items embedded by the fill so far
    total         bigint NOT NULL DEFAULT 0, -- items to embed (counted at start, refreshed)
    synced_until  timestamptz,               -- repair watermark: edits before it are embedded
    settle_until  timestamptz,               -- after a switch: repair passes run until then
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    activated_at  timestamptz,
    retired_at    timestamptz
);
CREATE UNIQUE INDEX embedding_models_one_active ON embedding_models ((true))
    WHERE state = 'active';

-- The fill walks memory_items in write order (keyset on seq, resumable from the cursor).
CREATE INDEX IF NOT EXISTS memory_items_seq_idx ON memory_items (seq);
