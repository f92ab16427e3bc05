"""The tenant's LLM as the service calls it: one metered client behind a circuit
breaker, and the strict JSON schemas its answers are asked to follow. Extraction,
consolidation and the reranker call it; it knows none of them."""
