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
# Extract a session now and answer its outcome (``Outcome.as_dict()``; {} when dropped).
Run = Callable[[str, str, str, bool], Awaitable[dict[str, Any]]]


class ExtractionTrigger:
    def __init__(
        self, submit: Submit | None, *, enabled: bool, every_n: int, run: Run | None = None
    ) -> None:
        self._submit = submit
        self._run = run
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

    async def run_now(self, key: SessionKey, timeout_s: float) -> dict[str, Any] | None:
        """Extract the session now and wait up to ``timeout_s`` for its outcome (mem0's
        synchronous add). None when it takes longer (the run goes on: it is shielded
        from the timeout) or cannot be asked (then the session is fired as usual)."""
        if self._run is None:
            self.fire(key, force=True)
            return None
        call = asyncio.ensure_future(self._run(key.tenant_id, key.user_id, key.session_id, True))
        self._pending.add(call)
        call.add_done_callback(self._pending.discard)
        call.add_done_callback(lambda t: t.cancelled() or t.exception())  # seen, not logged
        try:
            return await asyncio.wait_for(asyncio.shield(call), timeout_s)
        except TimeoutError:
            return None
        except Exception as exc:  # the turns are queued: the scan extracts them
            log.warning("could not run extraction of %s now: %r", key, exc)
            return None
