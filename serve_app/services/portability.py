"""Export and import of one user's memories, so users can leave or arrive with their data.

The export is JSON Lines: a header, the user's memories, facts (all versions) and
history events, and an ``end`` line with the counts (a truncated stream lacks it).
The import reads that format, and mem0's (``get_all``'s ``{"results": [...]}``, a list
of mem0 memories, or one per line), validates everything before writing anything,
and writes through the ordinary batch add path: one embedding call per batch (vectors
are never carried over: the target may run another model), quotas and isolation as
for any add. History is the source system's audit trail and is not replayed; every
imported memory gets its own ADD event. Timestamps are those of the import.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serve_app.errors import ApiError
from serve_app.schemas import MemoryFields
from serve_app.services.memories import MemoryService
from serve_app.store import NewMemory, Owner
from serve_app.store.directory import MemoryDirectory
from serve_app.store.facts import FactStore

FORMAT = "memserve-export"
VERSION = 1
SKIPPED_KINDS = ("header", "end", "history")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_json_default, separators=(",", ":")) + "\n"


class ImportedFact(BaseModel):
    model_config = ConfigDict(extra="ignore")
    category: str = Field(min_length=1, max_length=32)
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(min_length=1, max_length=8000)
    confidence: float = Field(default=0.9, ge=0.0, le=1.0)
    session_id: str | None = Field(default=None, max_length=128)


@dataclass
class ImportBatch:
    """Validated records, ready to write."""

    memories: list[tuple[MemoryFields, dict[str, Any]]] = field(default_factory=list)
    facts: list[ImportedFact] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1


def _records(text: str) -> list[tuple[int, Any]]:
    """(line number, decoded value): one JSON document (object or list), else JSON Lines."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        whole = json.loads(stripped)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        return [(i + 1, r) for i, r in enumerate(whole)]
    if isinstance(whole, dict) and isinstance(whole.get("results"), list):
        return [(i + 1, r) for i, r in enumerate(whole["results"])]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except ValueError as exc:
            raise ApiError(422, "invalid_request", f"line {n}: not JSON ({exc.msg})") from exc
    return out


def _memory_fields(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MemoryFields input, extras) of a memserve or a mem0 memory record."""
    if record.get("kind") == "memory":
        fields = {
            k: record.get(k) for k in ("content", "type", "agent_id", "session_id", "tags",
                                       "metadata", "importance")
        }  # fmt: skip
        extras = {"confidence": record.get("confidence"), "expires_at": record.get("expires_at")}
    else:  # mem0: {"memory", "metadata", "categories", "agent_id", "run_id", ...}
        fields = {
            "content": record.get("memory"),
            "agent_id": record.get("agent_id"),
            "session_id": record.get("run_id") or record.get("session_id"),
            "tags": record.get("categories"),
            "metadata": record.get("metadata"),
        }
        extras = {"expires_at": record.get("expiration_date")}
    fields = {k: v for k, v in fields.items() if v is not None}
    fields["scope"] = "session" if fields.get("session_id") else "user"
    return fields, extras


def parse(text: str) -> ImportBatch:
    """Validate every record (422 naming the first bad one); nothing is written here."""
    batch = ImportBatch()
    for n, record in _records(text):
        if not isinstance(record, dict):
            raise ApiError(422, "invalid_request", f"record {n}: expected a JSON object")
        kind = record.get("kind")
        try:
            if kind in SKIPPED_KINDS:
                batch.skip(kind)
            elif kind == "fact":
                if record.get("active", True):
                    batch.facts.append(ImportedFact.model_validate(record))
                else:
                    batch.skip("inactive_fact")
            elif kind == "memory" or (kind is None and isinstance(record.get("memory"), str)):
                fields, extras = _memory_fields(record)
                batch.memories.append((MemoryFields.model_validate(fields), extras))
            else:
                raise ApiError(422, "invalid_request", f"record {n}: unknown record kind")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            msg = f"record {n}: {where}: {first.get('msg', 'invalid')}"
            raise ApiError(422, "invalid_request", msg) from exc
    return batch


def _expiry(value: Any) -> datetime | None:
    """An ISO datetime or a YYYY-MM-DD date (mem0: visible through that day), or None."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    if len(str(value)) == 10:  # a date: the end of that day
        parsed = parsed.replace(hour=23, minute=59, second=59)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class PortabilityService:
    def __init__(
        self,
        memories: MemoryService,
        facts: FactStore,
        directory: MemoryDirectory,
        *,
        batch_items: int,
        page: int = 500,
    ) -> None:
        self.memories = memories
        self.facts = facts
        self.directory = directory
        self.batch_items = batch_items
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
                owner, limit=self.page, cursor=cursor, type=None, agent_id=None, session_id=None
            )
            for row in rows:
                counts["memories"] += 1
                yield dumps({"kind": "memory", **row})
            if cursor is None:
                break
        for row in await self.facts.list(owner, include_inactive=True):
            counts["facts"] += 1
            yield dumps({"kind": "fact", **row})
        async for row in self.directory.history(owner):
            counts["history"] += 1
            yield dumps({"kind": "history", **row})
        yield dumps({"kind": "end", **counts})

    async def load(self, owner: Owner, batch: ImportBatch, actor: str) -> dict[str, Any]:
        """Write a parsed batch for ``owner``: memories in batch-add chunks, then facts."""
        now = datetime.now(UTC)
        items: list[NewMemory] = []
        expired = 0
        for fields, extras in batch.memories:
            item = self.memories.new_memory(fields)
            expires_at = _expiry(extras.get("expires_at"))
            if expires_at is not None and expires_at <= now:
                expired += 1  # invisible at the source too: nothing to carry over
                continue
            if expires_at is not None:
                item.expires_at = expires_at
            if extras.get("confidence") is not None:
                item.confidence = float(extras["confidence"])
            item.source = "import"
            items.append(item)
        ids: list[str] = []
        for chunk in _chunks(items, self.batch_items):
            rows = await self.memories.add(owner, chunk, actor)
            ids.extend(str(r["id"]) for r in rows)
        outcomes: dict[str, int] = {}
        for f in batch.facts:
            outcome = await self.facts.upsert(
                owner, f.category, f.key, f.value, f.confidence,
                session_id=f.session_id, source="import",
            )  # fmt: skip
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        skipped = dict(batch.skipped)
        if expired:
            skipped["expired_memory"] = expired
        return {
            "imported": {"memories": len(ids), "facts": sum(outcomes.values())},
            "facts": outcomes,
            "skipped": skipped,
            "memory_ids": ids,
        }


def _chunks(items: Sequence[NewMemory], size: int) -> list[Sequence[NewMemory]]:
    return [items[i : i + size] for i in range(0, len(items), max(size, 1))]
