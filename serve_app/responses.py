"""Response models of the routes beyond memories and search (those are in serve_app.schemas).

They live here, not in their route modules, so the Python client (serve_app/client)
reads answers into the very models the routes declare without importing FastAPI,
the services or Ray. Models of answers that carry a report whose keys grow with the
service (consolidation, a dropped model) allow extra fields rather than drop them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from serve_app.schemas import MemoryBatch
from serve_app.tenant_settings import TenantSettings


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# health
class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str  # ready | unavailable (503)
    components: dict[str, str]  # component -> "ok" or why not


# memories: POST /v1/memories with infer: true
class QueuedJob(BaseModel):
    status: str  # queued
    job_id: str  # GET /v1/sessions/{job_id} shows its extraction


class MemoryBatchResult(MemoryBatch):
    """POST /v1/memories/batch: the stored memories, and a job per ``infer: true`` item
    (the route answers ``jobs`` only when there are some)."""

    jobs: list[QueuedJob] = Field(default_factory=list)


# facts
class Fact(BaseModel):
    id: UUID
    category: str
    key: str
    value: str
    confidence: float
    active: bool
    source: str
    session_id: str | None
    created_at: datetime
    updated_at: datetime
    superseded_at: datetime | None = None
    superseded_by: UUID | None = None
    valid_from: datetime | None = None  # when the value became true (null: unknown)
    valid_until: datetime | None = None  # when it stopped (its successor's valid_from)


class FactList(BaseModel):
    facts: list[Fact]
    next_cursor: str | None = None  # more facts: pass it as ``cursor``


# sessions
class TurnsAccepted(BaseModel):
    session_id: str
    accepted: int
    turn_range: list[int]
    extraction: str  # scheduled | buffered | raw (no LLM: stored as episodic turns)


class SessionEnded(BaseModel):
    session_id: str
    pending_turns: int
    extraction: str


class SessionStatus(BaseModel):
    session_id: str
    turns: int
    pending_turns: int
    failed_turns: int
    compressed_turns: int
    ended: bool
    # "budget": the tenant's or end user's background token budget is spent; the pending
    # turns stay queued and are extracted from ``resumes_at`` (or when it is raised).
    deferred: str | None = None
    resumes_at: datetime | None = None


# LLM spend (GET /v1/admin/usage)
class LlmUsageRow(BaseModel):
    """Sums over the rows of one group (the columns not grouped by are absent)."""

    day: str | None = None
    user_id: str | None = None  # "" for calls that are no end user's
    purpose: str | None = None  # extract | summarize | consolidate | infer | chat
    model: str | None = None
    calls: int
    errors: int
    estimated_calls: int  # the upstream reported no usage (or the call was lost)
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_ms: float  # summed; mean = latency_ms / calls


class LlmTopUser(BaseModel):
    user_id: str
    calls: int
    total_tokens: int
    prompt_tokens: int
    completion_tokens: int


class LlmUsageReport(BaseModel):
    tenant_id: str
    since: str  # first UTC day, inclusive
    until: str  # last UTC day, inclusive
    group_by: list[str]
    rows: list[LlmUsageRow]
    top_users: list[LlmTopUser]
    next_offset: int | None = None  # the next page's offset (None: this is the last)


# chat proxy
class UsageRow(BaseModel):
    key_id: str
    day: str
    requests: int
    refused: int
    prompt_tokens: int
    completion_tokens: int


class UsageResponse(BaseModel):
    usage: list[UsageRow]


# portability
class ImportCounts(BaseModel):
    memories: int
    facts: int
    fact_versions: int
    history: int
    documents: int = 0  # the user's documents, each a new version of its id


class ImportReport(BaseModel):
    imported: ImportCounts
    facts: dict[str, int]  # outcome (added, updated, ...) -> facts
    memory_ids: list[UUID]  # the new ids, in the order of the memory records
    skipped: dict[str, int]  # record kind -> records ignored (header, end, ...)


# admin: embedding models
class ModelInfo(_Open):
    slug: str
    ref: str
    name: str
    dim: int
    state: str  # active | filling | retired
    table: str
    progress: float  # share re-embedded into this table (1.0 once it serves)


class ModelList(BaseModel):
    models: list[ModelInfo]


class ModelDropped(BaseModel):
    dropped: ModelInfo


# admin: extraction and consolidation
class DeadLetter(BaseModel):
    user_id: str
    session_id: str
    turns: int
    first_turn: int
    last_turn: int
    attempts: int
    dead_at: datetime
    error: str | None


class DeadLetterList(BaseModel):
    dead_letters: list[DeadLetter]


class SessionRef(BaseModel):
    user_id: str
    session_id: str


class Retried(BaseModel):
    retried: list[SessionRef]  # the sessions queued again


class ConsolidationReport(_Open):
    merged: int
    archived: int
    insights: int
    digests: int
    decayed: int
    conflicts: int
    llm_errors: int
    skipped: str | None = None  # why nothing ran (another run holds the user)


class ProfileClassified(BaseModel):
    user_id: str
    examined: int  # memories without a class or a pin that the rule read
    classified: int  # of those, the ones that joined the profile
    next: UUID | None  # pass as ``after`` to go on; None: the user is done


# admin: tenant settings
class TenantSettingsView(BaseModel):
    tenant_id: str
    version: int  # 0: never changed (the environment's values throughout)
    updated_at: datetime | None
    updated_by: UUID | None  # the admin key; None: the operator's CLI
    settings: dict[str, Any]  # what the tenant set
    effective: TenantSettings  # what applies: the environment's values with those on top


class SettingsChange(BaseModel):
    version: int
    changed_at: datetime
    changed_by: UUID | None
    actor: str
    changes: list[dict[str, Any]]  # [{"field": "quotas.max_memories_per_user", "old", "new"}]
    old: dict[str, Any]
    new: dict[str, Any]


class SettingsHistory(BaseModel):
    changes: list[SettingsChange]


# users
class UserSummary(BaseModel):
    user_id: str
    memories: int  # active, valid now
    archived: int
    facts: int  # current ones
    sessions: int
    pending_turns: int  # waiting for extraction
    dead_turns: int  # dead-lettered (an admin retries them)
    last_activity: datetime | None


class UserList(BaseModel):
    users: list[UserSummary]
    next_cursor: str | None  # the next page's ``cursor`` (null: the last page)


class SessionSummary(BaseModel):
    session_id: str
    turns: int
    pending_turns: int
    extracted_turns: int
    dead_turns: int
    failed_turns: int
    started_at: datetime
    last_turn_at: datetime
    ended: bool


class SessionList(BaseModel):
    sessions: list[SessionSummary]


# events: GET /v1/events
class Event(BaseModel):
    id: UUID  # the event's id (a webhook's ``webhook-id``): the same on every redelivery
    cursor: str  # pass as ``after`` to read what follows this event
    type: str  # memory.added | memory.updated | ... (serve_app.store.events.EVENT_TYPES)
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    scope: str | None
    memory_id: UUID | None
    version: int | None  # the memory's row version after the change
    decision: str | None  # reconcile's decision, for extraction-made changes
    reason: str | None  # the model's reason for it
    actor: str | None
    data: dict[str, Any] | None  # fact category/key, import or forget counts
    content: str | None = None  # only with include_content=true (never after a forget)
    occurred_at: datetime


class EventPage(BaseModel):
    events: list[Event]
    next_cursor: str  # ``after`` of the next read (the same cursor again when nothing new)


# webhooks: /v1/admin/webhooks
class Webhook(BaseModel):
    id: UUID
    url: str
    types: list[str]  # empty: every type
    include_content: bool
    enabled: bool
    created_at: datetime
    updated_at: datetime


class WebhookCreated(Webhook):
    secret: str  # whsec_...: shown this once; verify webhook-signature with it


class WebhookState(Webhook):
    pending: int = 0  # deliveries not yet delivered (due or backing off)
    dead: int = 0  # deliveries that gave up (replay: POST .../replay)
    lag_s: float | None = None  # age of the oldest pending delivery's event
    last_delivered_at: datetime | None = None


class WebhookList(BaseModel):
    webhooks: list[WebhookState]


class WebhookDelivery(BaseModel):
    id: int
    event_id: UUID  # the webhook-id the receiver saw
    type: str
    owner: str
    status: str  # pending | delivered | dead
    attempts: int
    next_at: datetime
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveries(BaseModel):
    deliveries: list[WebhookDelivery]


class WebhookReplayed(BaseModel):
    replayed: int  # dead deliveries set pending again
