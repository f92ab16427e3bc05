"""Consolidation and reflection: a periodic per-user job over long-term memories."""
