"""Statements of writes to ``facts``, run only by the writer
(:class:`serve_app.store.guarded.GuardedWriter`), which holds the rules of a fact upsert.

One active value per (tenant, user, category, key); an upsert runs under the key's
advisory lock in one transaction, so two writers of one key take turns.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from serve_app.store.records import Owner

# Serialises the writers of one key (hashed into the advisory lock's key space).
LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))"
ACTIVE = (
    "SELECT id, value, confidence, source FROM facts WHERE tenant_id = %(tenant_id)s"
    " AND user_id = %(user_id)s AND category = %(category)s AND key = %(key)s AND active"
)
# The same value again: more confidence, the new importance, and an explicit source wins.
CONFIRM = (
    "UPDATE facts SET confidence = greatest(confidence, %(confidence)s),"
    " importance = %(importance)s, updated_at = now(),"
    " source = CASE WHEN %(explicit)s THEN %(source)s ELSE source END"
    " WHERE id = %(id)s"
)
# The replaced value stays, inactive, valid until its successor became true.
RETIRE = (
    "UPDATE facts SET active = false, superseded_at = now(),"
    " superseded_by = %(new_id)s, updated_at = now(),"
    " valid_until = greatest(coalesce(%(valid_from)s, now()), valid_from)"
    " WHERE id = %(id)s"
)
INSERT = (
    "INSERT INTO facts (id, tenant_id, user_id, category, key, value, confidence,"
    " source, session_id, importance, valid_from) VALUES (%(id)s, %(tenant_id)s,"
    " %(user_id)s, %(category)s, %(key)s, %(value)s, %(confidence)s, %(source)s,"
    " %(session_id)s, %(importance)s, %(valid_from)s)"
)


def lock_params(owner: Owner, category: str, key: str) -> dict[str, str]:
    return {"lock": f"fact:{owner.tenant_id}/{owner.user_id}/{category}/{key}"}


def delete_statement(
    owner: Owner, category: str | None, key: str | None
) -> tuple[sql.Composed, dict[str, Any]]:
    """Delete the user's facts (every version), optionally one category or one key."""
    where = [sql.SQL("tenant_id = %(tenant_id)s AND user_id = %(user_id)s")]
    params: dict[str, Any] = {"tenant_id": owner.tenant_id, "user_id": owner.user_id}
    for column, value in (("category", category), ("key", key)):
        if value is not None:
            where.append(sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column)))
            params[column] = value
    return sql.SQL("DELETE FROM facts WHERE {}").format(sql.SQL(" AND ").join(where)), params
