-- memserve schema v23 (issue 33): the knowledge base's documents.
--
-- A document's text lives in its chunks: memory_items rows of type 'document_chunk'
-- (source 'document', data = {document_id, version, chunk_index, char_start, char_end,
-- heading_path, title, source_url}) with their vectors in the model's vector table, so
-- search, re-embed, erase and export see them like any memory. This table is the
-- document's head: one row per (tenant, document_id), the version its chunks carry.
-- A re-post replaces the chunks and bumps the version in one transaction; the version
-- it replaced is kept in document_versions (metadata only: the text went with its chunks).
CREATE TABLE documents (
    tenant_id       text NOT NULL,
    document_id     text NOT NULL,
    owner           text NOT NULL,          -- '@org', '@agent:<id>' or the user id
    scope           text NOT NULL CHECK (scope IN ('org', 'agent', 'user')),
    agent_id        text,
    user_id         text,
    title           text,
    source_url      text,
    content_type    text NOT NULL,
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags            text[] NOT NULL DEFAULT '{}',
    version         integer NOT NULL DEFAULT 1,
    content_sha256  text NOT NULL,
    chars           integer NOT NULL,
    chunk_count     integer NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, document_id),
    CHECK (scope <> 'agent' OR agent_id IS NOT NULL),
    CHECK (scope <> 'user' OR user_id IS NOT NULL)
);
-- Lists: a tenant's documents of one owner, newest first.
CREATE INDEX documents_owner_idx ON documents (tenant_id, owner, updated_at DESC, document_id);
CREATE INDEX documents_tags_idx ON documents USING gin (tags);

-- Every version a document had (the current one included), written by the post that
-- made it; a re-post stamps the one it replaced with replaced_at.
CREATE TABLE document_versions (
    tenant_id       text NOT NULL,
    document_id     text NOT NULL,
    version         integer NOT NULL,
    owner           text NOT NULL,
    scope           text NOT NULL,
    agent_id        text,
    user_id         text,
    title           text,
    source_url      text,
    content_type    text NOT NULL,
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    tags            text[] NOT NULL DEFAULT '{}',
    content_sha256  text NOT NULL,
    chars           integer NOT NULL,
    chunk_count     integer NOT NULL,
    actor           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    replaced_at     timestamptz,
    PRIMARY KEY (tenant_id, document_id, version)
);
CREATE INDEX document_versions_owner_idx ON document_versions (tenant_id, owner);

-- A document's chunks in order (replace, delete and GET /v1/documents/{id} read them).
CREATE INDEX memory_items_document_idx ON memory_items
    (tenant_id, (data->>'document_id'), ((data->>'chunk_index')::integer))
    WHERE type = 'document_chunk';
