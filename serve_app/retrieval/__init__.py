"""Search over a user's memories: SQL filters, pgvector search, (later) caches and fusion."""
