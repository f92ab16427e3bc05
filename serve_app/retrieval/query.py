"""What a search asks for, independent of where it is answered (pgvector or a cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from serve_app.store.records import live, valid


@dataclass(frozen=True)
class SearchQuery:
    tenant_id: str
    user_id: str
    top_k: int
    threshold: float | None = None
    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    agent_id: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_after: datetime | None = None
    created_before: datetime | None = None
    text: str = ""
    mode: str = "hybrid"  # hybrid | dense | lexical
    # Owner keys to search (store.records.owner_key): empty = the user's own memories;
    # e.g. (user_id, "@agent:a1", "@org") searches their union.
    owners: tuple[str, ...] = ()
    include_archived: bool = False  # archived memories too (never cached: answered cold)
    # Validity (event time): by default only memories valid now; ``as_of`` those valid
    # then; ``include_invalidated`` retired ones too (audits). Either is answered cold.
    as_of: datetime | None = None
    include_invalidated: bool = False
    # The day the query is asked: relative periods in ``text`` ("last week") are read
    # against it (retrieval.temporal); None: ``as_of``'s day, else today.
    reference_date: date | None = None
    # Return each result's score split into its signals (retrieval.explain); off: no cost.
    explain: bool = False
    # Knowledge base: only chunks of these documents (``data.document_id``).
    document_ids: tuple[str, ...] = ()
    # The query vector may be a view of another text's encoder run (models.views): the
    # mean over ``view_of``'s tokens inside the character ranges ``view_spans`` (a part
    # of a message, the message without its time words), so ``text`` costs no encoding
    # of its own; a route that cannot pool views encodes ``text``. None: ``text``.
    view_of: str | None = None
    view_spans: tuple[tuple[int, int], ...] = ()

    @property
    def owner_keys(self) -> tuple[str, ...]:
        return self.owners or (self.user_id,)

    @property
    def reference_day(self) -> date | None:
        if self.reference_date is not None:
            return self.reference_date
        return self.as_of.date() if self.as_of is not None else None

    @property
    def current(self) -> bool:
        """Asks for what is valid now (what the hot cache holds)."""
        return self.as_of is None and not self.include_invalidated

    @property
    def filtered(self) -> bool:
        return bool(
            self.types
            or self.tags
            or self.agent_id
            or self.session_id
            or self.metadata
            or self.created_after
            or self.created_before
            or self.document_ids
        )


def item_filters(q: SearchQuery, alias: str = "i") -> tuple[sql.Composable, dict[str, Any]]:
    """WHERE clause over memory_items for the query's owners and filters, with its parameters.

    Named parameters (``%(tenant_id)s``, ``%(owners)s``, ...) so a caller can merge them
    with its own; a name used again elsewhere in the statement must carry the same value.
    ``owner`` is the generated owner-key column of migration 0004. Date filters compare
    event time (``valid_from``) where it is known, else the created time.
    """
    a = sql.Identifier(alias)
    parts: list[sql.Composable] = [
        sql.SQL("{}.tenant_id = %(tenant_id)s").format(a),
        sql.SQL("{}.owner = ANY(%(owners)s)").format(a),
        sql.SQL("TRUE" if q.include_archived else "{}.status = 'active'").format(a),
        sql.SQL(live(f"{alias}.")),
    ]
    params: dict[str, Any] = {"tenant_id": q.tenant_id, "owners": list(q.owner_keys)}
    if q.as_of is not None:
        parts.append(sql.SQL(valid(f"{alias}.", "%(as_of)s")))
        params["as_of"] = q.as_of
    elif not q.include_invalidated:
        parts.append(sql.SQL(valid(f"{alias}.")))
    event_time = f"coalesce({alias}.valid_from, {alias}.created_at)"
    for name, column, op, value in (
        ("types", "type", "= ANY(%(types)s)", list(q.types) if q.types else None),
        ("tags", "tags", "&& %(tags)s", list(q.tags) if q.tags else None),
        ("agent_id", "agent_id", "= %(agent_id)s", q.agent_id),
        ("session_id", "session_id", "= %(session_id)s", q.session_id),
        ("created_after", None, ">= %(created_after)s", q.created_after),
        ("metadata", "metadata", "@> %(metadata)s", Jsonb(q.metadata) if q.metadata else None),
        ("created_before", None, "< %(created_before)s", q.created_before),
        ("document_ids", "document_id", "= ANY(%(document_ids)s)", list(q.document_ids) or None),
    ):
        if value is not None:
            if column is None:  # a date filter: event time
                parts.append(sql.SQL(event_time + " " + op))
            elif column == "document_id":  # a chunk's document (data jsonb)
                parts.append(sql.SQL("({}.data->>'document_id') " + op).format(a))
            else:
                parts.append(sql.SQL("{}.{} " + op).format(a, sql.Identifier(column)))
            params[name] = value
    return sql.SQL(" AND ").join(parts), params
