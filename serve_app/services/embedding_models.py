"""The operator's view of the embedding models' vector tables: list them, drop a retired
one. Only the default tenant's admin keys manage them (the tables serve every tenant)."""

from __future__ import annotations

import logging
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.auth import Principal
from serve_app.errors import ApiError
from serve_app.store.model_registry import DropRefused, drop_retired, models

log = logging.getLogger(__name__)


class EmbeddingModelService:
    def __init__(self, pool: AsyncConnectionPool, operator_tenant: str) -> None:
        self.pool = pool
        self.operator_tenant = operator_tenant

    def _operator(self, caller: Principal) -> None:
        if caller.tenant_id != self.operator_tenant:
            raise ApiError(403, "forbidden", "embedding models are managed by the default tenant")

    async def list(self, caller: Principal) -> list[dict[str, Any]]:
        """Every vector table: state (active, filling, retired) and re-embed progress."""
        self._operator(caller)
        async with self.pool.connection() as conn:
            rows = await models(conn)
        return [r.as_dict() for r in rows]

    async def drop(self, caller: Principal, slug: str) -> dict[str, Any]:
        """Drop a retired model's vector table (409 while it serves, fills or a switch
        settles)."""
        self._operator(caller)
        try:
            async with self.pool.connection() as conn:
                row = await drop_retired(conn, slug)
        except LookupError as exc:
            raise ApiError(404, "not_found", "no such embedding model table") from exc
        except DropRefused as exc:
            raise ApiError(409, "conflict", str(exc)) from exc
        log.info("vector table of %s dropped by key %s", row.name, caller.key_id)
        return row.as_dict()
