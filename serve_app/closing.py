"""Closing what a composition root opened: newest first, every one tried."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

Closer = Callable[[], Awaitable[None]]


async def close_all(closers: list[Closer], log: logging.Logger, what: str) -> None:
    """Pop and await each closer, newest first; a failure is logged and does not stop
    the rest (a replica that stops must release everything it can). Idempotent: the
    list is empty afterwards."""
    while closers:
        closer = closers.pop()
        try:
            await closer()
        except Exception:
            log.warning("closing a %s resource failed", what, exc_info=True)
