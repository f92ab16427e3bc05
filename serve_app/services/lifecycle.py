"""The data-lifecycle parts of an Ingress replica: forget, access tracking, expiry purge, quotas.

Built once by the composition root (``build_lifecycle``); the background tasks
(access flush, purge) start here and stop with the replica.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool

from serve_app.services.access import AccessTracker
from serve_app.services.forget import ForgetService
from serve_app.services.purge import Purger
from serve_app.settings import Settings
from serve_app.store.forget import ForgetStore
from serve_app.store.quota import Quota


@dataclass
class Lifecycle:
    forget: ForgetService
    purger: Purger
    quota: Quota
    access: AccessTracker | None = None
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


def build_lifecycle(pool: AsyncConnectionPool, settings: Settings, model_slug: str) -> Lifecycle:
    """Services and started background tasks (needs a running event loop)."""
    s = settings.lifecycle
    store = ForgetStore(
        pool,
        model_slug,
        batch=s.forget_batch,
        lease_s=s.erasure_lease_s,
        concurrency=s.forget_concurrency,
    )
    out = Lifecycle(
        forget=ForgetService(store),
        purger=Purger(pool, store, s).start(),
        quota=Quota(
            settings.quota.max_memories_per_user or None,
            settings.quota.max_memories_per_tenant or None,
        ),
    )
    out.closers.append(out.purger.stop)
    if s.access_tracking:
        out.access = AccessTracker(
            pool, flush_s=s.access_flush_s, max_pending=s.access_max_pending
        ).start()
        out.closers.append(out.access.stop)
    return out
