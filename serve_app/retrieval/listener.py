"""LISTEN on the store's change channel and drop stale cache entries eagerly.

Correctness does not depend on it (every search compares versions with the
database); it frees memory early and makes a replica's next search for a changed
owner skip the stale entry without the check failing first.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from serve_app.db.listener import NotifyListener
from serve_app.store.memories import CHANGES_CHANNEL

OnChange = Callable[[str, str, int], object]


class ChangeListener(NotifyListener):
    def __init__(self, dsn: str, on_change: OnChange, *, retry_s: float = 1.0) -> None:
        super().__init__(dsn, CHANGES_CHANNEL, self._handle, retry_s=retry_s)
        self.on_change = on_change

    def _handle(self, payload: str) -> None:
        try:
            tenant_id, owner, version = json.loads(payload)
        except (ValueError, TypeError):
            return
        self.on_change(str(tenant_id), str(owner), int(version))
