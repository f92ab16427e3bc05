"""Validation of every memory and fact a writer stores, whoever produced it.

The API's schemas refuse bad input first (with their own limits); these checks hold
for every producer (import, extraction, consolidation) at the one write path, so a
record PostgreSQL would refuse (NUL, a non-finite score) is a 422, never a 500.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from serve_app.store.records import NewMemory

MEMORY_TYPES = frozenset(
    {"semantic", "fact", "preference", "procedural", "episodic", "insight"}
    | {"document_chunk"}  # a document's chunk: the documents service writes it
)  # = serve_app.schemas.MemoryType, plus the chunks the API never takes as a type
SCOPES = frozenset({"user", "session", "agent", "org"})
STATUSES = frozenset({"active", "archived"})
ID_CHARS = 128
CATEGORY_CHARS, KEY_CHARS = 32, 128


class ValidationError(ValueError):
    """A record no store may take (the API answers 422 ``invalid_request``)."""


def text(name: str, value: Any, limit: int, *, blank: bool = False) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string")
    if not blank and not value.strip():
        raise ValidationError(f"{name} must not be empty")
    if len(value) > limit:
        raise ValidationError(f"{name} is longer than {limit} characters")
    if "\x00" in value:
        raise ValidationError(f"{name} must not contain NUL characters")


def optional_id(name: str, value: Any) -> None:
    if value is not None:
        text(name, value, ID_CHARS)


def score(name: str, value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValidationError(f"{name} must be a number from 0 to 1")


def json_object(name: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError(f"{name} must be a JSON object")
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be finite JSON") from exc
    if "\\u0000" in encoded:
        raise ValidationError(f"{name} must not contain NUL characters")


def when(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise ValidationError(f"{name} must be a datetime with a time zone")


def field(name: str, value: Any, max_chars: int) -> None:
    """One memory field (an add's or an update's)."""
    if name == "content":
        text(name, value, max_chars)
    elif name == "type":
        if value not in MEMORY_TYPES:
            raise ValidationError(f"type must be one of {sorted(MEMORY_TYPES)}")
    elif name == "scope":
        if value not in SCOPES:
            raise ValidationError(f"scope must be one of {sorted(SCOPES)}")
    elif name == "status":
        if value not in STATUSES:
            raise ValidationError(f"status must be one of {sorted(STATUSES)}")
    elif name in ("agent_id", "session_id"):
        optional_id(name, value)
    elif name == "source":
        text(name, value, ID_CHARS)
    elif name in ("importance", "confidence"):
        score(name, value)
    elif name in ("metadata", "data"):
        json_object(name, value)
    elif name == "tags":
        if not isinstance(value, list | tuple):
            raise ValidationError("tags must be a list of strings")
        for tag in value:
            text("each tag", tag, max_chars)
    elif name in ("expires_at", "valid_from", "valid_until"):
        when(name, value)


def check_memory(item: NewMemory, max_chars: int) -> None:
    """Raise :class:`ValidationError` unless ``item`` may be stored."""
    for name, value in vars(item).items():
        field(name, value, max_chars)


def check_fact(
    category: Any, key: Any, value: Any, confidence: Any, importance: Any, max_chars: int
) -> None:
    text("category", category, CATEGORY_CHARS)
    text("key", key, KEY_CHARS)
    text("value", value, max_chars)
    score("confidence", confidence)
    score("importance", importance)
