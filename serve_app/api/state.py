"""The running app's collaborators (pool, stores, service), installed at replica start.

Serve freezes a copy of the FastAPI app for ``@serve.ingress``, so state set on
``app.state`` in the deployment's constructor would not reach the served copy;
a module-level holder does (route functions resolve it by module reference).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import AsyncConnectionPool

from serve_app.errors import ApiError
from serve_app.service import MemoryService
from serve_app.settings import Settings
from serve_app.store.keys import KeyStore


@dataclass
class AppState:
    settings: Settings
    pool: AsyncConnectionPool
    keys: KeyStore
    service: MemoryService
    model: dict[str, Any] = field(default_factory=dict)
    readiness_probes: dict[str, Callable[[], Awaitable[str]]] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)


_current: AppState | None = None


def install(state: AppState | None) -> None:
    global _current
    _current = state


def current() -> AppState:
    if _current is None:
        raise ApiError(503, "unavailable", "the service is starting up")
    return _current
