"""Stand-ins allowed in tests: only the LLM (a local OpenAI-compatible server)."""
