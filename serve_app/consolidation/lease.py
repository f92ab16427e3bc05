"""The lease one consolidation run holds on its owner (``consolidation_state``).

Same pattern as extraction's claims on turns (``claimed_until`` + ``claim_token``):
a run claims the owner with one conditional upsert, so at most one run per owner
holds it across replicas; a crashed replica's lease simply runs out and the next run
takes over. Nothing is held between statements: each write runs in a short
transaction that first renews the lease under the run's token (:meth:`Lease.hold`).
That UPDATE locks the lease row until the write commits, so a takeover waits for it
and then finds the lease fresh; a run whose lease was taken over gets
:class:`LeaseLost` instead of writing.

A forget of the owner stops a run too: it revokes the lease (its UPDATE waits for a
write holding the row, which then commits before the deletes), and a renewal fails
while an erasure of the owner runs or once one ran after the claim
(:func:`serve_app.store.erasure.voided_owner`), so a run that claimed before or during
a forget writes nothing built from what the forget deleted.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from serve_app.store.erasure import voided_owner
from serve_app.store.records import Owner, unclaimed

log = logging.getLogger(__name__)


_WHO = "tenant_id = %(tenant_id)s AND user_id = %(user_id)s"
_CLAIM = (
    "INSERT INTO consolidation_state AS c (tenant_id, user_id, claimed_until, claim_token)"
    " VALUES (%(tenant_id)s, %(user_id)s, now() + %(lease)s * interval '1 second', %(token)s)"
    " ON CONFLICT (tenant_id, user_id) DO UPDATE SET claimed_until = EXCLUDED.claimed_until,"
    " claim_token = EXCLUDED.claim_token WHERE "
    + unclaimed("c.")
    + " RETURNING claim_token, now() AS since"
)
_RENEW = (
    "UPDATE consolidation_state SET claimed_until = now() + %(lease)s * interval '1 second'"
    " WHERE "
    + _WHO
    + " AND claim_token = %(token)s AND NOT "
    + voided_owner("%(since)s")
    + " RETURNING claim_token"
)
_RELEASE = (
    "UPDATE consolidation_state SET claimed_until = NULL, claim_token = NULL"
    " WHERE " + _WHO + " AND claim_token = %(token)s"
)


class LeaseLost(Exception):
    """The run's lease ran out and another run took the owner over, or a forget of the
    owner revoked it: stop, write nothing."""


class Lease:
    """One run's hold on one owner; renewed by every write, released at the end."""

    def __init__(
        self, pool: AsyncConnectionPool, owner: Owner, token: uuid.UUID, lease_s: float
    ) -> None:
        self.pool, self.owner, self.token, self.lease_s = pool, owner, token, lease_s
        self.since: datetime | None = None  # the claim's time (database clock)

    def _params(self, **more: Any) -> dict[str, Any]:
        return {
            "tenant_id": self.owner.tenant_id,
            "user_id": self.owner.user_id,
            "lease": self.lease_s,
            **more,
        }

    @classmethod
    async def claim(cls, pool: AsyncConnectionPool, owner: Owner, lease_s: float) -> Lease | None:
        """The owner's lease, or None while another run holds a live one."""
        lease = cls(pool, owner, uuid.uuid4(), lease_s)
        async with pool.connection() as conn:
            cur = await conn.execute(_CLAIM, lease._params(token=lease.token))
            row = await cur.fetchone()
        if row is None:
            return None
        lease.since = row["since"]
        return lease

    async def _renew(self, conn: AsyncConnection) -> None:
        cur = await conn.execute(_RENEW, self._params(token=self.token, since=self.since))
        if await cur.fetchone() is None:
            raise LeaseLost(f"consolidation lease on {self.owner} was taken over or revoked")

    async def renew(self) -> None:
        """Extend the lease (before a slow step); raises :class:`LeaseLost` if taken over."""
        async with self.pool.connection() as conn:
            await self._renew(conn)

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[AsyncConnection]:
        """A short transaction for one write, holding the (renewed) lease row until it
        commits: the write cannot land after another run took the owner over."""
        async with self.pool.connection() as conn, conn.transaction():
            await self._renew(conn)
            yield conn

    async def release(self) -> None:
        """Let the next run in at once (best effort: otherwise the lease runs out)."""
        try:
            async with self.pool.connection() as conn:
                await conn.execute(_RELEASE, self._params(token=self.token))
        except psycopg.Error as exc:
            log.warning("releasing the consolidation lease on %s failed: %s", self.owner, exc)


__all__ = ["Lease", "LeaseLost", "unclaimed"]
