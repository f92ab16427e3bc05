"""One conversation message as extraction reads it, built from a ``session_turns`` row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass
class Turn:
    """One conversation message as extraction sees it."""

    role: str
    content: str
    turn_index: int = 0
    occurred_at: datetime | None = None  # when it was said (the prompt shows the day)
    name: str | None = None  # the message's ``name`` (who said it, as the platform shows)
    speaker_id: str | None = None  # the tenant's user who said it (a group session)


def turn_of(row: dict[str, Any]) -> Turn:
    """A ``session_turns`` row as extraction sees it."""
    return Turn(
        row["role"],
        row["content"],
        row["turn_index"],
        row.get("occurred_at"),
        row.get("speaker_name"),
        row.get("speaker_id"),
    )


def said_at(rows: Sequence[dict[str, Any]]) -> datetime | None:
    """When the newest turn of a batch was said: the event time (``valid_from``) of what
    extraction takes from it, unless the model dates an item itself."""
    return max((r["occurred_at"] for r in rows if r.get("occurred_at")), default=None)
