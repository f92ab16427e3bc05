"""What a search asks for, independent of where it is answered (pgvector or a cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql


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

    @property
    def owner_keys(self) -> tuple[str, ...]:
        return self.owners or (self.user_id,)

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
        )


def item_filters(q: SearchQuery, alias: str = "i") -> tuple[sql.Composable, list[Any]]:
    """WHERE clause over memory_items for the query's owners and filters.

    ``owner`` is the generated owner-key column of migration 0004.
    """
    a = sql.Identifier(alias)
    parts: list[sql.Composable] = [
        sql.SQL("{}.tenant_id = %s").format(a),
        sql.SQL("{}.owner = ANY(%s)").format(a),
        sql.SQL("{}.status = 'active'").format(a),
        sql.SQL("({}.expires_at IS NULL OR {}.expires_at > now())").format(a, a),
    ]
    params: list[Any] = [q.tenant_id, list(q.owner_keys)]
    for column, op, value in (
        ("type", "= ANY(%s)", list(q.types) if q.types else None),
        ("tags", "&& %s", list(q.tags) if q.tags else None),
        ("agent_id", "= %s", q.agent_id),
        ("session_id", "= %s", q.session_id),
        ("created_at", ">= %s", q.created_after),
    ):
        if value is not None:
            parts.append(sql.SQL("{}.{} " + op).format(a, sql.Identifier(column)))
            params.append(value)
    if q.metadata:
        from psycopg.types.json import Jsonb

        parts.append(sql.SQL("{}.metadata @> %s").format(a))
        params.append(Jsonb(q.metadata))
    if q.created_before is not None:
        parts.append(sql.SQL("{}.created_at < %s").format(a))
        params.append(q.created_before)
    return sql.SQL(" AND ").join(parts), params
