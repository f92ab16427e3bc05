"""Export and import of one user's memories, so users can leave or arrive with their data.

The export is JSON Lines: a header, the user's memories, facts (all versions) and
history events, and an ``end`` line with the counts (a truncated stream lacks it).
The import reads that format, and mem0's (``get_all``'s ``{"results": [...]}``, a list
of mem0 memories, or one per line; :mod:`serve_app.services.import_records` validates
every record first) and writes it all or nothing through ``import_batch``
(serve_app/store/guarded_import.py: erasure guard, quotas, validation) in one
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

from serve_app.services.documents import DocumentService
from serve_app.services.import_records import ImportBatch, parse
from serve_app.services.memories import MemoryService
from serve_app.services.write_errors import write_errors
from serve_app.store import Owner
from serve_app.store.directory import MemoryDirectory
from serve_app.store.guarded import GuardedWriter
from serve_app.store.guarded_import import import_batch

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
        documents: DocumentService | None = None,
    ) -> None:
        """``documents``: carries the user's documents; None: not exported."""
        self.documents = documents
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
            {
                "kind": "header",
                "format": FORMAT,
                "version": VERSION,
                "user_id": owner.user_id,
                "exported_at": datetime.now(UTC),
            }
        )
        cursor = None
        while True:
            rows, cursor = await self.memories.list(
                owner,
                limit=self.page,
                cursor=cursor,
                type=None,
                agent_id=None,
                session_id=None,
                include_invalidated=True,
            )
            for row in rows:
                counts["memories"] += 1
                yield dumps({"kind": "memory", **row})
            if cursor is None:
                break
        if self.documents is not None and owner.user_id is not None:
            async for record in self._documents(owner):
                counts["documents"] = counts.get("documents", 0) + 1
                yield dumps(record)
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

    async def _documents(self, owner: Owner) -> AsyncIterator[dict[str, Any]]:
        """The user's own documents (scope user), each with all its chunks."""
        assert self.documents is not None and owner.user_id is not None
        store, after = self.documents.store, None
        while True:
            heads = await store.list(owner.tenant_id, [owner.user_id], after=after, limit=100)
            for head in heads:
                chunks, last = [], -1
                while True:
                    rows = await store.chunks(
                        owner.tenant_id, head["document_id"], after=last, limit=self.page
                    )
                    chunks += [
                        {
                            "chunk_index": r["data"]["chunk_index"],
                            "content": r["content"],
                            "char_start": r["data"]["char_start"],
                            "char_end": r["data"]["char_end"],
                            "heading_path": r["data"].get("heading_path") or [],
                        }
                        for r in rows
                    ]
                    if len(rows) < self.page:
                        break
                    last = rows[-1]["data"]["chunk_index"]
                yield {"kind": "document", **head, "chunks": chunks}
            if len(heads) < 100:
                return
            after = (heads[-1]["updated_at"].isoformat(), heads[-1]["document_id"])

    async def load(self, owner: Owner, batch: ImportBatch, actor: str) -> dict[str, Any]:
        """Write a parsed batch for ``owner``: all of it in one transaction, or nothing.

        Vectors are computed first (chunks of ``embed_batch``, no transaction open)."""
        if batch.documents and self.documents is not None and owner.user_id is not None:
            await self.documents.check_restorable(owner, batch.documents)  # before any write
        texts = [m.item.content for m in batch.memories]
        vectors = np.zeros((0, 0), dtype=np.float32)
        if texts:
            chunks = [
                texts[i : i + self.embed_batch] for i in range(0, len(texts), self.embed_batch)
            ]
            vectors = np.concatenate(  # the Embedder's bulk lane: after interactive callers
                [await self.memories.embed(c, is_query=False, bulk=True) for c in chunks]
            )
        with write_errors():
            out = await import_batch(
                self.writer, owner, batch.memories, vectors, batch.events, batch.facts, actor=actor
            )
        skipped = dict(batch.skipped)
        if batch.documents and (self.documents is None or owner.user_id is None):
            skipped["document"] = len(batch.documents)
        elif batch.documents:
            # Each document in its own transaction, after the memories' (not all or
            # nothing with them): a document is replaced whole, like a re-post.
            assert self.documents is not None
            for doc in batch.documents:
                await self.documents.restore(owner, doc, actor)
            out["imported"] = {**out["imported"], "documents": len(batch.documents)}
        return {**out, "skipped": skipped}
