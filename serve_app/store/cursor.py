"""Keyset-pagination cursors: memory lists (created_at, id), fact lists (category, key,
created_at, id); opaque to callers."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime


class InvalidCursor(ValueError):
    pass


def encode_cursor(created_at: datetime, item_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(item_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, item = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return datetime.fromisoformat(created), uuid.UUID(item)
    except Exception as exc:  # any malformed cursor is the caller's error
        raise InvalidCursor("invalid cursor") from exc


def encode_fact_cursor(category: str, key: str, created_at: datetime, fact_id: uuid.UUID) -> str:
    """The cursor after a fact row: its (category, key, created_at, id) sort key."""
    raw = json.dumps([category, key, created_at.isoformat(), str(fact_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_fact_cursor(cursor: str) -> tuple[str, str, datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        category, key, created, fact = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(category, str) or not isinstance(key, str):
            raise TypeError("category and key are strings")
        return category, key, datetime.fromisoformat(created), uuid.UUID(fact)
    except Exception as exc:  # any malformed cursor is the caller's error
        raise InvalidCursor("invalid cursor") from exc
