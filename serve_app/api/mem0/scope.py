"""mem0 ``filters`` and entity ids to memserve owners and search filters.

Supported: entity ids (``user_id``, ``agent_id``, ``run_id``; ``"*"`` means any),
``AND`` lists of those, ``metadata`` exact matches, ``created_at`` ranges
(``gte``/``gt``/``lte``/``lt``) and ``categories`` (``in``/``contains``, memserve tags).
``OR``/``NOT`` and other operators are a clear 400 rather than a silently wider answer.
Isolation is memserve's: a user key is bound to its user, a service key names one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import re2

from serve_app.auth import Principal, resolve_owner
from serve_app.errors import ApiError
from serve_app.services.memories import SHARED_WRITERS
from serve_app.store import Owner

ENTITIES = ("user_id", "agent_id", "run_id", "app_id")
_ID = re2.compile(r"^[A-Za-z0-9_.:@\-]{1,128}$")


def bad(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


@dataclass
class Scope:
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_after: datetime | None = None
    created_before: datetime | None = None
    tags: list[str] = field(default_factory=list)

    @property
    def narrowed(self) -> bool:
        """Filters beyond the entity ids (list answers only entity filters)."""
        return bool(self.metadata or self.created_after or self.created_before or self.tags)

    def set_entity(self, key: str, value: Any) -> None:
        if value is None or value == "*":
            return
        if key == "app_id":
            raise bad("app_id is not supported by memserve: scope with user_id/agent_id/run_id")
        if not isinstance(value, str) or not _ID.match(value):
            raise bad(f"{key} must be an id of 1-128 characters [A-Za-z0-9_.:@-]")
        current = getattr(self, key)
        if current is not None and current != value:
            raise bad(f"conflicting values for {key}")
        setattr(self, key, value)


def _when(value: Any, key: str) -> datetime:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise bad(f"created_at.{key} must be an ISO date or datetime") from exc


def _term(scope: Scope, key: str, value: Any) -> None:
    if key in ENTITIES:
        scope.set_entity(key, value)
    elif key == "AND":
        if not isinstance(value, list):
            raise bad("AND takes a list of filters")
        for part in value:
            if not isinstance(part, dict):
                raise bad("AND takes a list of filters")
            for k, v in part.items():
                _term(scope, k, v)
    elif key == "metadata":
        if not isinstance(value, dict) or not all(
            isinstance(v, str | int | float | bool) for v in value.values()
        ):
            raise bad("metadata filters are exact matches on scalar values")
        scope.metadata.update(value)
    elif key == "created_at":
        ops = value if isinstance(value, dict) else {}
        if not ops or set(ops) - {"gte", "gt", "lte", "lt"}:
            raise bad("created_at filters take gte/gt/lte/lt")
        for op, v in ops.items():
            if op in ("gte", "gt"):
                scope.created_after = _when(v, op)
            else:
                scope.created_before = _when(v, op)
    elif key == "categories":
        if isinstance(value, dict) and set(value) <= {"in", "contains"}:
            listed = value.get("in", [])
            if not isinstance(listed, list):
                raise bad("categories.in takes a list of strings")
            raw = listed + ([value["contains"]] if "contains" in value else [])
        else:
            raw = value if isinstance(value, list) else [value]
        if not all(isinstance(t, str) and t for t in raw):
            raise bad("categories are strings")
        scope.tags.extend(raw)
    else:
        raise bad(
            f"filter {key!r} is not supported (entity ids, AND, metadata, created_at, categories)"
        )


def parse_filters(filters: dict[str, Any], base: Scope | None = None) -> Scope:
    scope = base or Scope()
    for key, value in filters.items():
        _term(scope, key, value)
    return scope


def entity_scope(body: Any) -> Scope:
    """A mem0 body's scope: its ``filters`` and its top-level entity ids (clients send
    either; a value in both must agree, else 400), so the owner is the user the rate
    limit charged (``serve_app.ratelimit.end_user``)."""
    scope = parse_filters(body.filters or {})
    for key in ENTITIES:
        scope.set_entity(key, getattr(body, key))
    return scope


def scope_owner(caller: Principal, scope: Scope) -> Owner:
    """The named user's memories; a service key naming only an agent gets the tenant's
    shared memories of that agent."""
    if scope.user_id is None and scope.agent_id is not None and caller.role in SHARED_WRITERS:
        return Owner(caller.tenant_id, None)
    return resolve_owner(caller, scope.user_id)
