"""When a memory was true: the rules of a PATCH of ``valid_from``/``valid_until``.

Retiring a memory (``valid_until``) never deletes it: reads hide it unless asked
(``include_invalidated``, ``as_of``) and its history records an INVALIDATE event.
``valid_until: null`` makes it valid again and drops its ``superseded_by`` link.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from serve_app.errors import ApiError

VALIDITY = ("valid_from", "valid_until")


def touches_validity(changes: dict[str, Any]) -> bool:
    return any(k in changes for k in VALIDITY)


def validity_patch(changes: dict[str, Any], current: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the changes to write, the history event) for a PATCH against the row ``current``.

    The interval must not end before it begins (a 422 that changes nothing).
    """
    changes = dict(changes)
    start: datetime | None = changes.get("valid_from", current.get("valid_from"))
    end: datetime | None = changes.get("valid_until", current.get("valid_until"))
    if start is not None and end is not None and end < start:
        raise ApiError(422, "invalid_request", "valid_until is before valid_from")
    if "valid_until" in changes and changes["valid_until"] is None:
        changes["superseded_by"] = None  # valid again: no longer retired by anything
    retiring = changes.get("valid_until") is not None and "content" not in changes
    return changes, "INVALIDATE" if retiring else "UPDATE"
