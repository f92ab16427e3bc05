"""memserve: a memory layer for LLM chat platforms on Ray Serve."""

__version__ = "0.1.0"
