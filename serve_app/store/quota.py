"""Memory and fact quotas per user and per tenant, checked where the write happens.

``memory_counts`` (kept by statement triggers, migration 0008) holds one row per
(tenant, owner) and one per tenant (owner ``''``), so the check is two indexed
reads in the same statement as the insert: over quota, the statement inserts
nothing. Concurrent writers of one user may overshoot by their in-flight batches
(the counters are read, not locked, so writers never queue behind each other).
Facts count active values (one per key); the check runs in the upsert's transaction
under the key's lock (:func:`facts_exceeded`), so only a new key can be refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from serve_app.store.records import NewMemory, Owner


@dataclass(frozen=True)
class Quota:
    """Maximum memories (or facts); 0 or None: unlimited."""

    per_user: int | None = None
    per_tenant: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.per_user) or bool(self.per_tenant)


class QuotaExceeded(Exception):
    def __init__(self, kind: str, limit: int, used: int, what: str = "memory") -> None:
        super().__init__(f"the {kind} {what} quota ({limit}) is reached ({used} stored)")
        self.kind, self.limit, self.used, self.what = kind, limit, used, what


_COUNT = (
    "coalesce((SELECT n FROM memory_counts WHERE tenant_id = %(tenant_id)s AND owner = {o}), 0)"
)
GATE = sql.SQL(
    "(%(quota_user)s::bigint IS NULL OR %(quota_user_n)s = 0 OR "
    + _COUNT.format(o="%(quota_owner)s")
    + " + %(quota_user_n)s <= %(quota_user)s)"
    " AND (%(quota_tenant)s::bigint IS NULL OR "
    + _COUNT.format(o="''")
    + " + %(quota_all_n)s <= %(quota_tenant)s)"
)


def params(
    quota: Quota, owner: Owner, items: Sequence[NewMemory], earlier: Sequence[NewMemory] = ()
) -> dict[str, Any]:
    """Parameters of ``GATE`` for adding ``items`` for ``owner`` after ``earlier``: items
    this transaction added without counting them yet (:func:`defer_counts`)."""
    every = [*earlier, *items]
    mine = sum(1 for i in every if i.scope in ("user", "session") and owner.user_id is not None)
    return {
        "quota_user": quota.per_user or None,
        "quota_owner": owner.user_id or "",
        "quota_user_n": mine,
        "quota_tenant": quota.per_tenant or None,
        "quota_all_n": len(every),
    }


async def exceeded(
    conn: AsyncConnection,
    quota: Quota,
    owner: Owner,
    items: Sequence[NewMemory],
    earlier: Sequence[NewMemory] = (),
) -> QuotaExceeded | None:
    """Which quota an add of ``items`` (after ``earlier``, see :func:`params`) would
    break (after the gate refused it)."""
    p = params(quota, owner, items, earlier)
    items = [*earlier, *items]
    cur = await conn.execute(
        "SELECT owner, n FROM memory_counts WHERE tenant_id = %(t)s AND owner = ANY(%(o)s)",
        {"t": owner.tenant_id, "o": [p["quota_owner"], ""]},
    )
    used = {r["owner"]: r["n"] for r in await cur.fetchall()}
    if quota.per_user and p["quota_user_n"]:
        n = used.get(p["quota_owner"], 0)
        if n + p["quota_user_n"] > quota.per_user:
            return QuotaExceeded("user", quota.per_user, n)
    if quota.per_tenant and used.get("", 0) + len(items) > quota.per_tenant:
        return QuotaExceeded("tenant", quota.per_tenant, used.get("", 0))
    return None


_COUNT_ADDED = (
    # The insert trigger's upsert (migration 0008), for rows a deferring transaction added.
    "INSERT INTO memory_counts (tenant_id, owner, n) SELECT tenant_id, owner, n FROM ("
    " SELECT tenant_id, owner, count(*) AS n FROM memory_items"
    " WHERE tenant_id = %(t)s AND id = ANY(%(ids)s::uuid[]) GROUP BY tenant_id, owner"
    " UNION ALL SELECT %(t)s, '', cardinality(%(ids)s::uuid[])) d ORDER BY tenant_id, owner"
    " ON CONFLICT (tenant_id, owner) DO UPDATE SET n = greatest(memory_counts.n + excluded.n, 0)"
    " RETURNING owner, n"
)


async def defer_counts(conn: AsyncConnection) -> None:
    """Inserts of this transaction are not counted as they happen (migration 0015): no
    lock on the tenant's count row until :func:`count_added`, which must follow."""
    await conn.execute("SET LOCAL memserve.defer_counts = on")


async def count_added(
    conn: AsyncConnection, tenant_id: str, ids: Sequence[Any], per_tenant: int | None = None
) -> None:
    """Count the memories ``ids`` this deferring transaction added (just before commit).

    The tenant's count row is locked from here to the commit, so concurrent batches of
    the tenant count one after another: a batch that takes the tenant past
    ``per_tenant`` (another batch committed while this one embedded, past its chunks'
    gates) raises :class:`QuotaExceeded` and rolls back instead of overshooting.
    """
    await conn.execute("SET LOCAL memserve.defer_counts = off")
    if not ids:
        return
    cur = await conn.execute(_COUNT_ADDED, {"t": tenant_id, "ids": list(ids)})
    total = next((r["n"] for r in await cur.fetchall() if r["owner"] == ""), 0)
    if per_tenant and total > per_tenant:
        raise QuotaExceeded("tenant", per_tenant, total - len(ids))


async def facts_exceeded(conn: AsyncConnection, quota: Quota, owner: Owner) -> QuotaExceeded | None:
    """Which fact quota one more active fact of ``owner`` would break, if any."""
    if quota.per_user:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM facts"
            " WHERE tenant_id = %(t)s AND user_id = %(u)s AND active",
            {"t": owner.tenant_id, "u": owner.user_id},
        )
        n = (await cur.fetchone())["n"]
        if n >= quota.per_user:
            return QuotaExceeded("user", quota.per_user, n, "fact")
    if quota.per_tenant:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM facts WHERE tenant_id = %(t)s AND active",
            {"t": owner.tenant_id},
        )
        n = (await cur.fetchone())["n"]
        if n >= quota.per_tenant:
            return QuotaExceeded("tenant", quota.per_tenant, n, "fact")
    return None
