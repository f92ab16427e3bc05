"""Readiness: the database answers, and each component reports its state."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from psycopg_pool import AsyncConnectionPool

Probe = Callable[[], Awaitable[str]]
PROBE_TIMEOUT_S = 2.0


class HealthService:
    def __init__(self, pool: AsyncConnectionPool, probes: Mapping[str, Probe]) -> None:
        self.pool = pool
        self.probes = dict(probes)

    async def _database(self) -> str:
        async with self.pool.connection() as conn:
            await conn.execute("SELECT 1")
        return "ok"

    async def readiness(self) -> tuple[bool, dict[str, str]]:
        """(ready, component -> state); a probe that fails or hangs makes it not ready."""
        components: dict[str, str] = {}
        ok = True
        for name, probe in {"database": self._database, **self.probes}.items():
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    components[name] = await probe()
            except Exception as exc:  # any failure means not ready
                components[name] = f"unavailable: {type(exc).__name__}"
                ok = False
        return ok, components
