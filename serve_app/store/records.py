"""Plain records passed between the API layer and the store, and the memory column list."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql


@dataclass(frozen=True)
class Owner:
    """Whose memories a call may touch: always a tenant, and a user for user-scoped data.

    ``user_id`` None means the tenant's shared (agent/org) memories; only service
    and admin keys get such an owner (``write_owner``/``read_owner`` in
    ``serve_app.services.memories`` decide).
    """

    tenant_id: str
    user_id: str | None


@dataclass
class NewMemory:
    content: str
    type: str = "semantic"
    scope: str = "user"
    agent_id: str | None = None
    session_id: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    confidence: float = 1.0
    source: str = "api"
    expires_at: datetime | None = None
    # Event time: when what it states became true (None: unknown, reads use created_at).
    valid_from: datetime | None = None
    # Ids of the owner's memories this one retires (their valid_until becomes its
    # valid_from or now, their superseded_by its id), in the same statement as the add.
    supersedes: list[Any] = field(default_factory=list)
    # Profile: the class given by the LLM in extraction (None: the store's
    # classifier decides at write time); ``pinned`` true/false overrides the class.
    profile_class: str | None = None
    pinned: bool | None = None


# The memory_items columns every read returns (and the API shows).
MEMORY_COLUMNS: tuple[str, ...] = (
    "id",
    "user_id",
    "agent_id",
    "session_id",
    "scope",
    "type",
    "content",
    "tags",
    "metadata",
    "importance",
    "confidence",
    "source",
    "created_at",
    "updated_at",
    "expires_at",
    "version",  # row version: optimistic concurrency (PATCH If-Match, merges)
    "status",  # active | archived (archived: out of search and context)
    "access_count",  # times returned by search/context (batched, see services.access)
    "last_accessed_at",
    "valid_from",  # event time: when it became true (None: unknown, see ``valid``)
    "valid_until",  # when it stopped being true (None: still valid); retired, not deleted
    "supersedes",  # ids this memory retired
    "superseded_by",  # the memory that retired this one
)


def live(alias: str = "") -> str:
    """SQL for a memory row that has not expired (``alias``: prefix such as ``"i."``).

    The one spelling of "live": every read, dedup, merge and cache load uses it, so
    expiry cannot be forgotten in one of them.
    """
    return f"({alias}expires_at IS NULL OR {alias}expires_at > now())"


def valid(alias: str = "", at: str | None = None) -> str:
    """SQL for a memory (or fact) row that is true now, or at timestamp ``at`` (a SQL
    expression such as ``"%(as_of)s"``).

    Now: not retired (``valid_until`` unset or still ahead). At a past time: it had
    become true by then (``valid_from``, unknown: ``created_at``) and was not retired
    yet. The one spelling of validity for lists, searches, cache loads and dedup.
    """
    until = f"({alias}valid_until IS NULL OR {alias}valid_until > {at or 'now()'})"
    if at is None:
        return until
    return f"(coalesce({alias}valid_from, {alias}created_at) <= {at} AND {until})"


def unclaimed(alias: str = "") -> str:
    """SQL for a row no live claim holds (``claimed_until`` unset or past): extraction's
    claims on turns and consolidation's lease on an owner expire the same way."""
    return f"({alias}claimed_until IS NULL OR {alias}claimed_until < now())"


def column_list(columns: Sequence[str], alias: str | None = None) -> sql.Composed:
    """``a.c1, a.c2, ...`` as quoted identifiers (no column name is ever string-spliced)."""
    if alias is None:
        return sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    return sql.SQL(", ").join(sql.Identifier(alias, c) for c in columns)


def owner_key(user_id: str | None, scope: str, agent_id: str | None) -> str:
    """Cache/version key of the set a memory belongs to (memory_items.owner, migration 0004)."""
    if scope in ("user", "session") and user_id is not None:
        return user_id
    if scope == "agent":
        return f"@agent:{agent_id or ''}"
    return "@org"
