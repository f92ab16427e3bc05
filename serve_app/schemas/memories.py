"""Memories and search: the shared field types and validators of every request body,
and the memory, search, history and error shapes (DESIGN §8 is the contract).

Validation happens here, before anything touches the database, so bad input is
a 4xx that changes nothing. Limits come from settings.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from serve_app.settings import get_settings

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@\-]+$")
]
# Who said a message (OpenAI's ``name``): shown in the extraction prompt as the speaker,
# so no line breaks, brackets or colons that would read as prompt structure.
SpeakerName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f\[\]:]+$")
]
_NOT_IN_NAMES = str.maketrans("", "", "".join(map(chr, range(32))) + "\x7f[]:")


def speaker_name(value: Any) -> str | None:
    """A ``name`` taken from a payload that is forwarded as it is (the chat proxy's
    OpenAI messages, mem0's): made a :data:`SpeakerName`, or None."""
    if not isinstance(value, str):
        return None
    return value.translate(_NOT_IN_NAMES).strip()[:64] or None


# Free text that reaches a text column: PostgreSQL refuses NUL, so it is a 422 here.
NO_NUL = r"^[^\x00]*$"
# memory_items.version is a PostgreSQL integer: a bigger one is a 422, not an overflow.
MAX_ROW_VERSION = 2**31 - 1


class MemoryType(StrEnum):
    semantic = "semantic"
    fact = "fact"
    preference = "preference"
    procedural = "procedural"
    episodic = "episodic"
    insight = "insight"


Scope = Literal["user", "session", "agent", "org"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, str_strip_whitespace=False)


def check_content(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise ValueError("content must not be empty")
    limit = get_settings().limits.content_chars
    if len(value) > limit:
        raise ValueError(f"content is longer than {limit} characters")
    if "\x00" in value:
        raise ValueError("content must not contain NUL characters")
    return value


def _check_tags(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    s = get_settings()
    if len(value) > s.limits.tags:
        raise ValueError(f"at most {s.limits.tags} tags")
    out: list[str] = []
    for tag in value:
        if not tag.strip() or len(tag) > s.limits.tag_chars or "\x00" in tag:
            raise ValueError(f"each tag must be 1..{s.limits.tag_chars} characters")
        if tag not in out:
            out.append(tag)
    return out


def _check_importance(value: float | None) -> float | None:
    # Stored as PostgreSQL `real`: 1e-308 would underflow (a 500); 6 decimals are plenty.
    return None if value is None else round(value, 6)


def at_most(limit_name: str, message: str, *, size: bool = False):
    """A validator: the value (or its length, with ``size``) may not exceed a limit setting
    (a field of ``settings.limits``, read at validation time)."""

    def check(value: Any) -> Any:
        limit = getattr(get_settings().limits, limit_name)
        if value is not None and (len(value) if size else value) > limit:
            raise ValueError(message.format(limit=limit))
        return value

    return check


def _check_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    limit = get_settings().limits.metadata_bytes
    try:
        encoded = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise ValueError("metadata must be finite JSON") from exc
    if len(encoded.encode()) > limit:
        raise ValueError(f"metadata is larger than {limit} bytes")
    if "\\u0000" in encoded:
        raise ValueError("metadata must not contain NUL characters")
    return value


# How far ahead of the server's clock a client's "when it was said" may be (clock skew).
MAX_FUTURE_S = 86400


def event_time(value: datetime | None) -> datetime | None:
    """An event time (``valid_from``/``valid_until``/``as_of``): ISO 8601; naive is UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


# Relative periods ("last week") are read against a reference day in this range: a
# conversation's day, not any day the calendar type can hold.
REFERENCE_YEARS = (1900, 2200)


def reference_day(value: Any) -> Any:
    """``reference_date``: the day relative periods in a query are read against (the day
    it was asked): an ISO 8601 date, or a date-time (its UTC day; naive is UTC)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("reference_date must be an ISO 8601 date or date-time") from None
    if isinstance(value, datetime):
        value = event_time(value).astimezone(UTC).date()
    first, last = REFERENCE_YEARS
    if isinstance(value, date) and not first <= value.year <= last:
        raise ValueError(f"reference_date must be in the years {first}..{last}")
    return value


def said_time(value: datetime | None) -> datetime | None:
    """When a message was said (``occurred_at``): an event time, not in the future."""
    value = event_time(value)
    if value is not None and value > datetime.now(UTC) + timedelta(seconds=MAX_FUTURE_S):
        raise ValueError("occurred_at is in the future")
    return value


class MemoryFields(StrictModel):
    content: str
    type: MemoryType = MemoryType.semantic
    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    infer: bool = False
    scope: Scope | None = None
    # Expiry (either, not both): seconds from now, or an absolute time; then invisible.
    ttl_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)
    expires_at: datetime | None = None
    # Event time: when it became true (default unknown: reads use created_at).
    valid_from: datetime | None = None
    # The owner's memories this one replaces: they are retired (valid_until, superseded_by)
    # in the same transaction; an unknown or foreign id is a 404 that writes nothing.
    supersedes: list[UUID] | None = Field(default=None, max_length=100)
    # The profile: true: always in the user's context blocks; false: never
    # in the profile; null (default): its class, given at write time, decides.
    pinned: bool | None = None

    _content = field_validator("content")(check_content)
    _tags = field_validator("tags")(_check_tags)
    _metadata = field_validator("metadata")(_check_metadata)
    _importance = field_validator("importance")(_check_importance)
    _valid_from = field_validator("valid_from")(event_time)


class MemoryCreate(MemoryFields):
    user_id: Identifier | None = None


class MemoryBatchCreate(StrictModel):
    user_id: Identifier | None = None
    items: list[MemoryFields] = Field(min_length=1)

    _items = field_validator("items")(
        at_most("batch_items", "at most {limit} items per batch", size=True)
    )


class MemoryPatch(StrictModel):
    content: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    type: MemoryType | None = None
    ttl_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)  # expire from now
    expires_at: datetime | None = None  # absolute expiry (send ttl_s or expires_at)
    status: Literal["active", "archived"] | None = None  # archived: out of search/context
    valid_from: datetime | None = None  # event time: when it became true
    valid_until: datetime | None = None  # retire it (null: valid again); never deletes
    pinned: bool | None = None  # profile override (null: automatic again)
    version: int | None = Field(default=None, ge=1, le=MAX_ROW_VERSION)  # only this row version

    _content = field_validator("content")(check_content)
    _tags = field_validator("tags")(_check_tags)
    _metadata = field_validator("metadata")(_check_metadata)
    _importance = field_validator("importance")(_check_importance)
    _valid = field_validator("valid_from", "valid_until")(event_time)


class SearchFilters(StrictModel):
    """Exact-match filters on memory metadata keys (all must match)."""

    metadata: dict[str, str | int | float | bool] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class SearchRequest(StrictModel):
    user_id: Identifier | None = None
    query: str
    top_k: int | None = Field(default=None, ge=1)
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    types: list[MemoryType] | None = Field(default=None, max_length=16)
    tags: list[str] | None = None
    filters: SearchFilters | None = None
    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    mode: Literal["hybrid", "dense", "lexical"] = "hybrid"
    include_archived: bool = False  # archived memories too (answered from PostgreSQL)
    as_of: datetime | None = None  # what was valid then (event time)
    # The day the query is asked: "last week", "two months ago" are read against it
    # (default: as_of's day, else today).
    reference_date: date | None = None
    include_invalidated: bool = False  # retired memories too (audits)
    explain: bool = False  # each result's score split into its signals (costs nothing off)
    # Knowledge base: the tenant's readable documents next to the user's own
    # memories (org; the agent's with agent_id). ``scopes`` picks whose: user (the user's
    # own memories and documents), agent, org; ``document_ids`` only those documents' chunks.
    knowledge: bool = True
    scopes: list[Literal["user", "agent", "org"]] | None = Field(
        default=None, min_length=1, max_length=3
    )
    document_ids: list[Identifier] | None = Field(default=None, min_length=1, max_length=100)
    # Re-score the candidates: true (the default back-end) or one by name; off
    # by default. A back-end the tenant is not offered: 422 (README, Re-ranking and explain).
    rerank: bool | Literal["onnx", "llm"] = False

    _query = field_validator("query")(check_content)
    _as_of = field_validator("as_of")(event_time)
    _reference = field_validator("reference_date", mode="before")(reference_day)
    _tags = field_validator("tags")(_check_tags)

    _top_k = field_validator("top_k")(at_most("top_k", "top_k must be at most {limit}"))


class Memory(BaseModel):
    id: UUID
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    scope: str
    type: str
    content: str
    tags: list[str]
    metadata: dict[str, Any]
    importance: float
    confidence: float
    source: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    status: str = "active"
    access_count: int = 0  # times returned by search/context (written in batches)
    last_accessed_at: datetime | None = None
    version: int = 1  # row version; send it back as If-Match (or "version") on PATCH
    valid_from: datetime | None = None  # event time: when it became true (null: unknown)
    valid_until: datetime | None = None  # when it stopped being true (null: valid now)
    supersedes: list[UUID] = Field(default_factory=list)  # the memories it retired
    superseded_by: UUID | None = None  # the memory that retired it


class Citation(BaseModel):
    """Where a knowledge-base chunk came from (null on a memory)."""

    document_id: str
    title: str | None = None
    chunk_index: int | None = None
    heading_path: list[str] = Field(default_factory=list)
    source_url: str | None = None
    version: int | None = None  # the document version the chunk belongs to


class ScoredMemory(Memory):
    score: float
    similarity: float | None = None
    citation: Citation | None = None  # set when the result is a document chunk
    rerank_score: float | None = None  # the re-scoring back-end's score (``rerank``)


class RerankInfo(BaseModel):
    """What a request's ``rerank`` did: ``applied`` false with a ``reason`` (not_configured,
    over_budget, llm_unavailable, llm_malformed, no_candidates): the search order stands."""

    backend: str | None
    applied: bool
    reason: str | None = None
    candidates: int = 0  # re-scored (at most MEMSERVE_RERANK_MAX_CANDIDATES)


class ScoreBreakdown(BaseModel):
    """The signals that ranked a result (serve_app/retrieval/explain.py); ``final`` is
    w_similarity x ``relevance`` + ``importance`` + ``recency`` (those two weighted)."""

    similarity: float | None
    lexical: float
    entity: float
    time: float
    neighbour: float
    expansion: float
    relevance: float
    importance: float
    recency: float
    final: float
    source: Literal["memory", "knowledge"] = "memory"  # a memory, or a document chunk
    why: str | None = None  # a chunk: its document and whether the context gate admits it


class ExplainedMemory(ScoredMemory):
    explain: ScoreBreakdown


class MemoryList(BaseModel):
    memories: list[Memory]
    next_cursor: str | None


class MemoryBatch(BaseModel):
    memories: list[Memory]


class SearchResponse(BaseModel):
    results: list[ExplainedMemory] | list[ScoredMemory]  # explain: true gives the former
    rerank: RerankInfo | None = None  # only when the request asked for it


class DeletedCount(BaseModel):
    deleted: int
    # A forget: what was removed, per kind (memories, vectors, history, facts, turns, sessions)
    removed: dict[str, int] | None = None


class HistoryEvent(BaseModel):
    id: int
    memory_id: UUID
    event: str
    old_content: str | None
    new_content: str | None
    actor: str | None
    created_at: datetime
    # Why (extraction's reconcile): decision, the model's reason, source turns, chain ids.
    new_data: dict[str, Any] | None = None


class HistoryResponse(BaseModel):
    events: list[HistoryEvent]
    supersedes: list[UUID] = Field(default_factory=list)  # the chain, as GET shows it
    superseded_by: UUID | None = None


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody
