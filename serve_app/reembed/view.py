"""A replica's live view of the model registry: which model serves, which one fills.

Replicas start from the :class:`~serve_app.bootstrap.ModelFacts` the bootstrap handed
them and follow the registry: a NOTIFY on ``memserve_models`` (sent by the switch, a
fill's start and a drop) re-reads it at once, a poll every ``poll_s`` covers a lost
notification. When the active model changes, ``on_switch`` gets its facts: the replica
embeds with that model and reads that table from then on.

``active`` is the one piece of state: its ``filling`` is the model being filled, kept
current by every refresh (a fill that starts or is dropped changes no active model),
and :attr:`ModelView.filling` reads it, so the two can never disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from serve_app.db.listener import NotifyListener
from serve_app.embedding_model import ModelFacts
from serve_app.store.model_registry import MODELS_CHANNEL, ModelRow, models

log = logging.getLogger("ray.serve")
OnSwitch = Callable[[ModelFacts], object]


class ModelView:
    def __init__(
        self,
        pool: AsyncConnectionPool | None,
        dsn: str,
        model: ModelFacts,
        *,
        poll_s: float = 5.0,
        on_switch: OnSwitch | None = None,
    ) -> None:
        self.pool = pool  # None: a short connection per read
        self.dsn = dsn
        self.active = model  # with .filling: the one source of truth (see the docstring)
        self.rows: list[ModelRow] = []
        self.poll_s = poll_s
        self.on_switch = on_switch
        self.listener = NotifyListener(dsn, MODELS_CHANNEL, self._kick, on_connect=self._kick)
        self._poller: asyncio.Task | None = None
        self._refreshing: asyncio.Task | None = None

    @property
    def filling(self) -> ModelFacts | None:
        """The model being filled, as of the last refresh (None: no model change)."""
        return self.active.filling

    def start(self) -> ModelView:
        self.listener.start()
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll())
        return self

    async def stop(self) -> None:
        await self.listener.stop()
        for task in (self._poller, self._refreshing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._poller = self._refreshing = None

    def _kick(self, _payload: str | None = None) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._safe_refresh())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self._safe_refresh()

    async def _safe_refresh(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # the database may be down: keep the last view
            log.warning("model registry unreadable (%s); keeping %s", exc, self.active.name)

    async def refresh(self) -> bool:
        """Re-read the registry; True when the active model changed (``on_switch`` ran)."""
        if self.pool is not None:
            async with self.pool.connection() as conn:
                rows = await models(conn)
        else:
            async with await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, row_factory=dict_row
            ) as conn:
                rows = await models(conn)
        self.rows = rows
        active = next((r for r in rows if r.state == "active"), None)
        filling = next((r for r in rows if r.state == "filling"), None)
        fill = ModelFacts.of_row(filling) if filling else None
        if active is None or active.slug == self.active.table_slug:
            if fill != self.active.filling:  # a fill started, moved on or was dropped
                self.active = replace(self.active, filling=fill)
            return False
        self.active = ModelFacts.of_row(active, fill)
        log.info("embedding model is now %s (table %s)", active.name, active.slug)
        if self.on_switch is not None:
            self.on_switch(self.active)
        return True
