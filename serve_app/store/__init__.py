"""Persistence: memories, vectors, history, API keys (PostgreSQL is the source of truth)."""

from serve_app.store.memories import MemoryStore
from serve_app.store.records import NewMemory, Owner

__all__ = ["MemoryStore", "NewMemory", "Owner"]
