"""Extraction: session turns to memories and facts through an LLM (Extractor deployment)."""
