"""Export and import of one user's memories, so users can leave or arrive with their data.

The export is JSON Lines: a header, the user's memories, facts (all versions) and
history events, and an ``end`` line with the counts (a truncated stream lacks it).
The import reads that format, and mem0's (``get_all``'s ``{"results": [...]}``, a list
of mem0 memories, or one per line; :mod:`serve_app.services.import_records` validates
every record first) and writes it all or nothing through
:meth:`GuardedWriter.import_batch` (erasure guard, quotas, validation) in one
transaction. Vectors are never carried over (the target may run another model); scope,
expiry, status, timestamps, validity, history events (attributed to the new ids) and
every fact version are.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from serve_app.services.import_records import ImportBatch, parse
from serve_app.services.memories import MemoryService
from serve_app.services.write_errors import write_errors
from serve_app.store import Owner
from serve_app.store.directory import MemoryDirectory
from serve_app.store.guarded import GuardedWriter

FORMAT = "memserve-export"
VERSION = 1
__all__ = ["FORMAT", "VERSION", "ImportBatch", "PortabilityService", "dumps", "parse"]


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_json_default, separators=(",", ":")) + "\n"


class PortabilityService:
    def __init__(
        self,
        memories: MemoryService,
        writer: GuardedWriter,
        directory: MemoryDirectory,
        *,
        max_records: int,
        embed_batch: int = 256,
        page: int = 500,
    ) -> None:
        self.memories = memories
        self.writer = writer
        self.facts = writer.facts  # reads (export)
        self.directory = directory
        self.max_records = max_records  # per import request
        self.embed_batch = embed_batch
        self.page = page

    async def export(self, owner: Owner) -> AsyncIterator[str]:
        """The user's data as JSON Lines (header, memories, facts, history, end)."""
        counts = {"memories": 0, "facts": 0, "history": 0}
        yield dumps(
            {"kind": "header", "format": FORMAT, "version": VERSION, "user_id": owner.user_id,
             "exported_at": datetime.now(UTC)}
        )  # fmt: skip
        cursor = None
        while True:
            rows, cursor = await self.memories.list(
                owner, limit=self.page, cursor=cursor, type=None, agent_id=None,
                session_id=None, include_invalidated=True,
            )  # fmt: skip
            for row in rows:
                counts["memories"] += 1
                yield dumps({"kind": "memory", **row})
            if cursor is None:
                break
        after = None
        while True:
            rows = await self.facts.list(owner, include_inactive=True, limit=self.page, after=after)
            for row in rows:
                counts["facts"] += 1
                yield dumps({"kind": "fact", **row})
            if len(rows) < self.page:
                break
            last = rows[-1]
            after = (last["category"], last["key"], last["created_at"], last["id"])
        async for row in self.directory.history(owner):
            counts["history"] += 1
            yield dumps({"kind": "history", **row})
        yield dumps({"kind": "end", **counts})

    async def load(self, owner: Owner, batch: ImportBatch, actor: str) -> dict[str, Any]:
        """Write a parsed batch for ``owner``: all of it in one transaction, or nothing.

        Vectors are computed first (chunks of ``embed_batch``, no transaction open)."""
        texts = [m.item.content for m in batch.memories]
        vectors = np.zeros((0, 0), dtype=np.float32)
        if texts:
            chunks = [
                texts[i : i + self.embed_batch] for i in range(0, len(texts), self.embed_batch)
            ]
            vectors = np.concatenate([await self.memories.embed(c, is_query=False) for c in chunks])
        with write_errors():
            out = await self.writer.import_batch(
                owner, batch.memories, vectors, batch.events, batch.facts, actor=actor
            )
        return {**out, "skipped": dict(batch.skipped)}
