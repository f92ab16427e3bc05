"""Prompt context: pre-filter, query expansion, token budget, formatting."""

from serve_app.context.builder import ContextBuilder, ContextRequest, ContextResult
from serve_app.context.prefilter import is_greeting, is_self_contained

__all__ = [
    "ContextBuilder",
    "ContextRequest",
    "ContextResult",
    "is_greeting",
    "is_self_contained",
]
