"""Bodies of the mem0 routes, in the shapes the official ``mem0ai`` client sends and reads.

Requests are lenient like mem0's (unknown options are accepted and ignored; ``rerank``
on search re-scores when the tenant is offered a back-end, and is mem0's no-op when
not: the response's ``rerank`` says which); what memserve stores is still validated by
its own models (content, tags, metadata limits). ``custom_categories`` on add is
honoured (see the add route).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator

from serve_app.schemas.memories import reference_day


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class Message(Lenient):
    role: str = Field(max_length=32)
    # Who said it (mem0 and OpenAI's ``name``): kept with the words, "Sam: ...", so
    # what someone else said is not stored or extracted as the user's own.
    name: str | None = None
    # Text, or mem0's multimodal content: one part ``{"type": "pdf_url", "pdf_url":
    # {"url": ...}}`` or a list of parts (serve_app/api/mem0/documents.py reads them).
    content: str | dict[str, Any] | list[Any] = Field(union_mode="left_to_right")


class EntityFields(Lenient):
    """Entity ids, top level (add, delete_all) or inside ``filters`` (v3 search/list)."""

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None


class AddRequest(EntityFields):
    messages: list[Message] = Field(min_length=1)
    filters: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    infer: bool = True
    expiration_date: date | None = None
    # mem0's [{"name": "description"}]: the categories extraction tags memories with
    # (instead of the tenant's); validated like the tenant settings' (422).
    custom_categories: list[Any] | None = None


class SearchRequest(EntityFields):
    query: str
    filters: dict[str, Any] = Field(default_factory=dict)
    top_k: int | None = Field(default=None, ge=1)
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    categories: list[str] | None = None
    # Not mem0's: the day the query is asked ("last week" is read against it; /v1/search).
    reference_date: date | None = None
    # mem0's flag (true: the default back-end), or memserve's back-end by name
    rerank: bool | Literal["onnx", "llm"] | None = None

    _reference = field_validator("reference_date", mode="before")(reference_day)


class ListRequest(EntityFields):
    filters: dict[str, Any] = Field(default_factory=dict)
    page: int | None = Field(default=None, ge=1)
    page_size: int | None = Field(default=None, ge=1)
    start_date: str | None = None
    end_date: str | None = None
    categories: list[str] | None = None


class UpdateRequest(Lenient):
    text: str | None = None
    metadata: dict[str, Any] | None = None
    timestamp: int | float | str | None = None
    expiration_date: date | None = None


class BatchUpdateItem(Lenient):
    memory_id: UUID
    text: str | None = None
    metadata: dict[str, Any] | None = None


class BatchDeleteItem(Lenient):
    memory_id: UUID


class BatchUpdate(Lenient):
    memories: list[BatchUpdateItem] = Field(min_length=1)


class BatchDelete(Lenient):
    memories: list[BatchDeleteItem] = Field(min_length=1)


# ---------- responses ----------


class Mem0Memory(BaseModel):
    id: UUID
    memory: str
    user_id: str | None
    agent_id: str | None
    app_id: str | None = None
    run_id: str | None  # search's name for the session
    session_id: str | None  # get/list's name for it
    metadata: dict[str, Any] | None
    categories: list[str]
    created_at: datetime
    updated_at: datetime
    expiration_date: date | None = None
    type: str  # memserve's memory type (semantic, preference, ...)
    importance: float


class Mem0Scored(Mem0Memory):
    score: float
    citation: dict[str, Any] | None = None  # a knowledge-base chunk's source


class Mem0SearchResults(BaseModel):
    results: list[Mem0Scored]
    rerank: dict[str, Any] | None = None  # what ``rerank`` did (memserve's; mem0 ignores it)


class Mem0Page(BaseModel):
    count: int
    next: str | None
    previous: str | None
    results: list[Mem0Memory]


class AddedMemory(BaseModel):
    id: UUID
    event: str = "ADD"  # ADD | UPDATE | DELETE | NONE (mem0's event list)
    memory: str
    data: dict[str, str]
    previous_memory: str | None = None  # UPDATE: the text it replaced
    document: dict[str, Any] | None = None  # a document message: the knowledge base's head


def from_event(event: dict[str, Any]) -> dict[str, Any]:
    """An extraction event (``Outcome.events``) in mem0's add-result shape."""
    out = {
        "id": event["id"],
        "event": event["event"],
        "memory": event["memory"],
        "data": {"memory": event["memory"]},
    }
    if event.get("previous_memory") is not None:
        out["previous_memory"] = event["previous_memory"]
    return out


class AddResponse(BaseModel):
    status: str  # SUCCEEDED (stored now) | PENDING (queued for extraction)
    event_id: str | None  # the extraction job (GET /v1/sessions/{event_id}); None: stored now
    message: str
    results: list[AddedMemory]


class Message200(BaseModel):
    message: str


class Deleted(Message200):
    deleted: int


class HistoryEntry(BaseModel):
    id: str
    memory_id: UUID
    input: list[dict[str, str]]
    old_memory: str | None
    new_memory: str | None
    user_id: str | None
    event: str
    categories: list[str] | None = None
    metadata: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


class Entity(BaseModel):
    id: str
    name: str
    type: str  # user | agent | run
    owner: str  # the tenant
    total_memories: int
    metadata: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime


class EntityList(BaseModel):
    count: int
    next: str | None = None
    previous: str | None = None
    results: list[Entity]
    total_users: int
    total_agents: int
    total_apps: int = 0
    total_runs: int


class Ping(BaseModel):
    status: str
    org_id: str
    project_id: str
    user_email: str | None = None
    role: str
    user_id: str | None


def to_mem0(row: dict[str, Any]) -> dict[str, Any]:
    """A memserve memory row in mem0's memory shape."""
    expires = row.get("expires_at")
    return {
        "id": row["id"],
        "memory": row["content"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "run_id": row["session_id"],
        "session_id": row["session_id"],
        "metadata": row["metadata"],
        "categories": row["tags"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "expiration_date": expires.date() if expires else None,
        "type": row["type"],
        "importance": row["importance"],
        **({"score": row["score"]} if "score" in row else {}),
        **({"citation": row["citation"]} if row.get("citation") else {}),
    }


HISTORY_EVENTS = {
    "ADD": "ADD",
    "UPDATE": "UPDATE",
    "DELETE": "DELETE",
    "MERGE": "UPDATE",
    "INVALIDATE": "DELETE",  # retired (valid_until), kept for audits and as_of
}


def to_history(event: dict[str, Any], user_id: str | None) -> dict[str, Any]:
    return {
        "id": str(event["id"]),
        "memory_id": event["memory_id"],
        "input": [],
        "old_memory": event["old_content"],
        "new_memory": event["new_content"],
        "user_id": user_id,
        "event": HISTORY_EVENTS.get(event["event"], "UPDATE"),
        "metadata": {
            "actor": event["actor"],
            "memserve_event": event["event"],
            **({"why": event["new_data"]} if event.get("new_data") else {}),
        },
        "created_at": event["created_at"],
        "updated_at": event["created_at"],
    }
