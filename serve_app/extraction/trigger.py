"""The ingress side of extraction: fire-and-forget calls to the extractor deployment.

The chat path never waits for the LLM: a trigger is a background task that
hands the session to the extractor and only logs if that fails (the turns are
in PostgreSQL already, so the extractor's periodic scan picks them up anyway).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from serve_app.store.turns import SessionKey

log = logging.getLogger(__name__)

Submit = Callable[[str, str, str, bool], Awaitable[Any]]


class ExtractionTrigger:
    def __init__(self, submit: Submit | None, *, enabled: bool, every_n: int) -> None:
        self._submit = submit
        self.enabled = enabled  # False: no LLM; turns become raw episodic memories instead
        self.every_n = max(1, every_n)
        self._pending: set[asyncio.Task[None]] = set()

    def due(self, pending_user_turns: int) -> bool:
        """Whether an append makes the session due (every N user turns; every turn without LLM)."""
        if not self.enabled:
            return pending_user_turns > 0
        return pending_user_turns >= self.every_n

    def fire(self, key: SessionKey, force: bool = False) -> None:
        if self._submit is None:
            return
        task = asyncio.create_task(self._call(key, force))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _call(self, key: SessionKey, force: bool) -> None:
        try:
            assert self._submit is not None
            await self._submit(key.tenant_id, key.user_id, key.session_id, force)
        except Exception as exc:  # the scan will find the turns; never raise into chat
            log.warning("could not hand %s to the extractor: %r", key, exc)
