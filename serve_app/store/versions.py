"""``memory_owner_versions``: one counter per memory owner, bumped by every write.

Caches compare the counter (and listen on ``memserve_changes``) so nothing stale
is served. The bump is a CTE fragment so a write, its history and the bump go
to the server as one statement (one round trip, atomic even in autocommit).
"""

from __future__ import annotations

from psycopg import sql

CHANGES_CHANNEL = "memserve_changes"


def bump_ctes(owners: sql.Composable) -> sql.Composed:
    """CTEs ``bumped`` and ``notified``: bump each owner ``owners`` yields, NOTIFY the change.

    ``owners`` is a query with one text column ``owner``; the statement must bind
    ``%(tenant_id)s`` and ``%(channel)s``. A write within one tenant; see
    :func:`bump_owner_ctes`, which this is, for the semantics.
    """
    return bump_owner_ctes(
        sql.SQL("SELECT %(tenant_id)s::text AS tenant_id, s.owner FROM ({owners}) s").format(
            owners=owners
        )
    )


def bump_owner_ctes(owners: sql.Composable) -> sql.Composed:
    """CTEs ``bumped`` and ``notified`` for owners of any tenants (the re-embed worker's).

    ``owners`` is a query with text columns ``tenant_id`` and ``owner``; the statement
    must bind ``%(channel)s``. Each distinct owner's version moves by one; owners are
    locked in sorted order so concurrent writers never deadlock. The payload is
    ``[tenant, owner, version]``. A statement must select from ``notified`` (see
    ``NOTIFIED``) or no NOTIFY goes out.
    """
    return sql.SQL(
        "bumped AS (INSERT INTO memory_owner_versions (tenant_id, owner, version)"
        " SELECT o.tenant_id, o.owner, 1"
        " FROM (SELECT DISTINCT tenant_id, owner FROM ({owners}) s) o"
        " ORDER BY o.tenant_id, o.owner"
        " ON CONFLICT (tenant_id, owner) DO UPDATE"
        " SET version = memory_owner_versions.version + 1 RETURNING tenant_id, owner, version),"
        " notified AS (SELECT pg_notify(%(channel)s,"
        " json_build_array(tenant_id, owner, version)::text) FROM bumped)"
    ).format(owners=owners)


NOTIFIED = sql.SQL("(SELECT count(*) FROM notified)")
