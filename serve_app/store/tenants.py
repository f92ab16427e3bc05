"""``tenants``, ``tenant_settings`` and their audit history (migration 0012).

A tenant's settings row holds its overrides (a JSON document) and a version; each
change is one transaction that locks the row, applies the caller's change to what
is stored now (so concurrent changes never lose each other), bumps the version and
appends a history row with the old and new documents. The row's trigger notifies
``memserve_tenants`` at commit, which every replica's cache listens to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

TENANTS_CHANNEL = "memserve_tenants"
_ROW = "settings, version, updated_at, updated_by"


class _Unchanged(Exception):
    """A change that left the document as it was: its transaction rolls back."""

    def __init__(self, row: dict[str, Any]) -> None:
        super().__init__("unchanged")
        self.row = row


class SettingsConflict(Exception):
    """The stored settings are not at the version the change was made against."""

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(f"the settings are at version {current}, not {expected}")
        self.expected, self.current = expected, current


class TenantStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def create(self, tenant_id: str) -> bool:
        """Register a tenant; False when it exists already."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO tenants (id) VALUES (%(id)s) ON CONFLICT DO NOTHING", {"id": tenant_id}
            )
            return cur.rowcount == 1

    async def settings(self, tenant_id: str) -> dict[str, Any] | None:
        """The stored overrides with version and last change, or None (never set)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_ROW} FROM tenant_settings WHERE tenant_id = %(t)s", {"t": tenant_id}
            )
            return await cur.fetchone()

    async def change(
        self,
        tenant_id: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        actor: str,
        key_id: UUID | None,
        expected_version: int | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Apply ``change`` (old document -> new) under the row's lock; (row, changed).

        An exception from ``change`` (invalid settings) rolls everything back; a change
        that leaves the document as it was writes nothing and records no history.
        """
        params = {"t": tenant_id}
        try:
            return await self._change(params, change, actor, key_id, expected_version)
        except _Unchanged as same:  # rolled back: a never-configured tenant stays unwritten
            return same.row, False

    async def _change(
        self,
        params: dict[str, Any],
        change: Callable[[dict[str, Any]], dict[str, Any]],
        actor: str,
        key_id: UUID | None,
        expected_version: int | None,
    ) -> tuple[dict[str, Any], bool]:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO tenants (id) VALUES (%(t)s) ON CONFLICT DO NOTHING", params
            )
            await conn.execute(
                "INSERT INTO tenant_settings (tenant_id) VALUES (%(t)s) ON CONFLICT DO NOTHING",
                params,
            )
            cur = await conn.execute(
                f"SELECT {_ROW} FROM tenant_settings WHERE tenant_id = %(t)s FOR UPDATE", params
            )
            row = await cur.fetchone()
            if expected_version is not None and expected_version != row["version"]:
                raise SettingsConflict(expected_version, row["version"])
            new = change(dict(row["settings"]))
            if new == row["settings"]:
                raise _Unchanged(row)
            cur = await conn.execute(
                "UPDATE tenant_settings SET settings = %(new)s, version = version + 1,"
                " updated_at = now(), updated_by = %(key)s WHERE tenant_id = %(t)s"
                f" RETURNING {_ROW}",
                {**params, "new": Jsonb(new), "key": key_id},
            )
            updated = await cur.fetchone()
            await conn.execute(
                "INSERT INTO tenant_settings_history (tenant_id, version, changed_at,"
                " changed_by, actor, old_settings, new_settings) VALUES (%(t)s, %(v)s,"
                " %(at)s, %(key)s, %(actor)s, %(old)s, %(new)s)",
                {
                    **params,
                    "v": updated["version"],
                    "at": updated["updated_at"],
                    "key": key_id,
                    "actor": actor,
                    "old": Jsonb(row["settings"]),
                    "new": Jsonb(new),
                },
            )
            return updated, True

    async def history(
        self, tenant_id: str, *, limit: int, before_version: int | None = None
    ) -> list[dict[str, Any]]:
        """Changes newest first (``before_version``: the page after the one that ended there)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT version, changed_at, changed_by, actor, old_settings, new_settings"
                " FROM tenant_settings_history WHERE tenant_id = %(t)s"
                " AND (%(before)s::bigint IS NULL OR version < %(before)s)"
                " ORDER BY id DESC LIMIT %(limit)s",
                {"t": tenant_id, "before": before_version, "limit": limit},
            )
            return await cur.fetchall()
