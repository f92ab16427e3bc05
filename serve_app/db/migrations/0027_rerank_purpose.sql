-- memserve schema v27: the LLM back-end of search/context re-scoring is metered
-- like every LLM call, under its own purpose ('rerank', in the 'chat' group: a request-path
-- call, refused over budget, after which the results keep their search order).
ALTER TABLE llm_calls DROP CONSTRAINT llm_calls_purpose_check;
ALTER TABLE llm_calls ADD CONSTRAINT llm_calls_purpose_check CHECK (purpose IN
    ('extract', 'summarize', 'consolidate', 'infer', 'chat', 'rerank'));
