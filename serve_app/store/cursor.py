"""Keyset-pagination cursors of memory lists: an opaque (created_at, id) pair."""

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
