"""Parsing and validating an import body: every record is checked before anything is
written, and the first bad one is a 422 naming its line (or its index in a JSON list).

Pure and synchronous: the route runs it in a worker thread (``asyncio.to_thread``),
off the event loop. Accepted: our export (JSON Lines: header, memories, facts of every
version, history events, end) and mem0's ``get_all`` output (``{"results": [...]}``,
a list, or one memory per line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serve_app.errors import ApiError
from serve_app.schemas import NO_NUL, Identifier, MemoryFields
from serve_app.schemas.documents import ExportedDocument
from serve_app.settings import get_settings
from serve_app.store import NewMemory
from serve_app.store.imports import ImportedEvent, ImportedFact, ImportedMemory

SKIPPED_KINDS = ("header", "end")
EVENTS = ("ADD", "UPDATE", "DELETE", "MERGE", "INVALIDATE")
Text = Field(default=None, max_length=64_000, pattern=NO_NUL)


def _aware(value: datetime | None) -> datetime | None:
    """Timestamps without a zone are UTC (exports always carry one)."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class _Carried(BaseModel):
    """What a memory record keeps besides the fields an add takes."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    id: str | None = Field(default=None, max_length=128)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    status: Literal["active", "archived"] = "active"
    data: dict[str, Any] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    superseded_by: str | None = Field(default=None, max_length=128)
    supersedes: list[str] = Field(default_factory=list, max_length=1000)

    _aware = field_validator("created_at", "updated_at", "valid_from", "valid_until")(_aware)


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore")
    memory_id: str = Field(max_length=128)
    event: Literal[EVENTS]  # type: ignore[valid-type]
    old_content: str | None = Text
    new_content: str | None = Text
    actor: str | None = Field(default=None, max_length=128, pattern=NO_NUL)
    created_at: datetime | None = None
    new_data: dict[str, Any] | None = None  # why (reconcile: decision, reason, turns)

    _aware = field_validator("created_at")(_aware)


class _Fact(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    id: str | None = Field(default=None, max_length=128)
    category: str = Field(min_length=1, max_length=32, pattern=NO_NUL)
    key: str = Field(min_length=1, max_length=128, pattern=NO_NUL)
    value: str = Field(min_length=1, max_length=8000, pattern=NO_NUL)
    confidence: float = Field(default=0.9, ge=0.0, le=1.0)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    active: bool = True
    source: str = Field(default="import", min_length=1, max_length=128, pattern=NO_NUL)
    session_id: Identifier | None = None
    superseded_by: str | None = Field(default=None, max_length=128)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    superseded_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None

    _aware = field_validator(
        "created_at", "updated_at", "superseded_at", "valid_from", "valid_until"
    )(_aware)


@dataclass
class ImportBatch:
    """Validated records, ready to write; ``records``: how many the body held."""

    memories: list[ImportedMemory] = field(default_factory=list)
    events: list[ImportedEvent] = field(default_factory=list)
    facts: list[ImportedFact] = field(default_factory=list)
    documents: list[ExportedDocument] = field(default_factory=list)  # the user's documents
    skipped: dict[str, int] = field(default_factory=dict)
    records: int = 0

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1


def _records(text: str) -> tuple[str, list[tuple[int, Any]]]:
    """("line" | "record", [(number, decoded value)]): one JSON document (a list, or
    mem0's ``{"results": [...]}``), else JSON Lines."""
    stripped = text.strip()
    if not stripped:
        return "line", []
    if stripped[0] in "[{":
        try:
            whole = json.loads(stripped)
        except (ValueError, RecursionError):
            whole = None
        if isinstance(whole, dict) and isinstance(whole.get("results"), list):
            whole = whole["results"]
        if isinstance(whole, list):
            return "record", [(i + 1, r) for i, r in enumerate(whole)]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((n, json.loads(line)))
        except (ValueError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise ApiError(422, "invalid_request", f"line {n}: not JSON ({msg})") from exc
    return "line", out


def _when(value: Any) -> datetime | None:
    """An ISO datetime or a YYYY-MM-DD date (mem0: visible through that day), or None."""
    if not value:
        return None
    if not isinstance(value, str):
        raise ValueError("expires_at must be an ISO date or datetime")
    parsed = datetime.fromisoformat(value)  # ValueError: a 422 naming the line
    if len(value) == 10:  # a date: the end of that day
        parsed = parsed.replace(hour=23, minute=59, second=59)
    return _aware(parsed)


def _memory(record: dict[str, Any], now: datetime) -> ImportedMemory | None:
    """A memserve or mem0 memory record; None when it has expired (nothing to carry)."""
    if record.get("kind") == "memory":
        names = ("content", "type", "agent_id", "session_id", "tags", "metadata", "importance")
        fields = {k: record.get(k) for k in names}
        scope = record.get("scope") or ("session" if record.get("session_id") else "user")
        if scope not in ("user", "session"):
            raise ValueError(f"scope {scope!r}: only user and session memories are imported")
        if scope == "session" and not record.get("session_id"):
            raise ValueError("a session memory needs session_id")
        expires, carried = record.get("expires_at"), dict(record)
    else:  # mem0: {"memory", "metadata", "categories", "agent_id", "run_id", ...}
        fields = {
            "content": record.get("memory"),
            "agent_id": record.get("agent_id"),
            "session_id": record.get("run_id") or record.get("session_id"),
            "tags": record.get("categories"),
            "metadata": record.get("metadata"),
        }
        scope = "session" if fields["session_id"] else "user"
        expires = record.get("expiration_date")
        carried = {k: record.get(k) for k in ("id", "created_at", "updated_at")}
    fields = {k: v for k, v in fields.items() if v is not None}
    f = MemoryFields.model_validate({**fields, "scope": scope})
    c = _Carried.model_validate(carried)
    expires_at = _when(expires)
    if expires_at is not None and expires_at <= now:
        return None  # invisible at the source too
    item = NewMemory(
        content=f.content,
        type=f.type.value,
        scope=scope,
        agent_id=f.agent_id,
        session_id=f.session_id,
        tags=f.tags or [],
        metadata=f.metadata or {},
        data=c.data or {},
        importance=0.5 if f.importance is None else f.importance,
        confidence=c.confidence,
        source="import",
        expires_at=expires_at,
    )
    return ImportedMemory(
        item,
        c.id,
        c.created_at,
        c.updated_at,
        c.status,
        c.valid_from,
        c.valid_until,
        c.superseded_by,
        c.supersedes,
    )


def _fact(record: dict[str, Any]) -> ImportedFact:
    f = _Fact.model_validate(record)
    return ImportedFact(
        f.category,
        f.key,
        f.value,
        f.confidence,
        f.importance,
        f.active,
        f.source,
        f.session_id,
        f.id,
        f.superseded_by,
        f.created_at,
        f.updated_at,
        f.superseded_at,
        f.valid_from,
        f.valid_until,
    )


def _add(batch: ImportBatch, record: dict[str, Any], now: datetime) -> None:
    kind = record.get("kind")
    if kind in SKIPPED_KINDS:
        batch.skip(kind)
    elif kind == "history":
        e = _Event.model_validate(record)
        batch.events.append(
            ImportedEvent(
                e.memory_id,
                e.event,
                e.old_content,
                e.new_content,
                e.actor,
                e.created_at,
                e.new_data,
            )
        )
    elif kind == "fact":
        batch.facts.append(_fact(record))
    elif kind == "document":
        doc = ExportedDocument.model_validate({**record, "user_id": None})
        if len(doc.chunks) > get_settings().documents.max_chunks:
            raise ValueError(f"a document has at most {get_settings().documents.max_chunks} chunks")
        batch.documents.append(doc)
    elif kind == "memory" or (kind is None and isinstance(record.get("memory"), str)):
        memory = _memory(record, now)
        if memory is None:
            batch.skip("expired_memory")
        else:
            batch.memories.append(memory)
    else:
        raise ValueError("unknown record kind")


def _unique_id(
    batch: ImportBatch, before: tuple[int, int], where: str, seen: dict[tuple[str, str], str]
) -> None:
    """ValueError when the record just added repeats the ``id`` of an earlier one of its
    kind: ids link history and fact versions, and two facts with one id were a 500 (a
    primary key violation) after part of the batch had been written."""
    added = (
        ("memory", batch.memories[-1].source_id)
        if len(batch.memories) > before[0]
        else ("fact", batch.facts[-1].source_id)
        if len(batch.facts) > before[1]
        else None
    )
    if added is None or added[1] is None:
        return
    if added in seen:
        raise ValueError(f"{added[0]} id {added[1]!r} repeats the id of {seen[added]}")
    seen[added] = where


def parse(text: str, max_records: int) -> ImportBatch:
    """Validate every record (422 naming the first bad one, 413 over ``max_records``);
    nothing is written here."""
    unit, records = _records(text)
    counted = sum(
        1 for _, r in records if not (isinstance(r, dict) and r.get("kind") in SKIPPED_KINDS)
    )
    if counted > max_records:
        raise ApiError(
            413,
            "payload_too_large",
            f"{counted} records; at most {max_records} per import (the CLI splits files)",
        )
    batch = ImportBatch(records=counted)
    now = datetime.now(UTC)
    seen: dict[tuple[str, str], str] = {}  # (kind, id at the source) -> where it was
    for n, record in records:
        if not isinstance(record, dict):
            raise ApiError(422, "invalid_request", f"{unit} {n}: expected a JSON object")
        try:
            before = len(batch.memories), len(batch.facts)
            _add(batch, record, now)
            _unique_id(batch, before, f"{unit} {n}", seen)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            msg = f"{unit} {n}: {where}: {first.get('msg', 'invalid')}"
            raise ApiError(422, "invalid_request", msg) from None
        except ValueError as exc:
            raise ApiError(422, "invalid_request", f"{unit} {n}: {exc}") from None
    return batch
