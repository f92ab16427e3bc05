"""Bodies of context building, the chat proxy's messages and the user profile: what
``POST /v1/context`` takes and returns, validated like every request.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, Field, field_validator

from serve_app.schemas.memories import (
    Identifier,
    Memory,
    RerankInfo,
    ScoredMemory,
    SpeakerName,
    StrictModel,
    at_most,
    check_content,
    reference_day,
)

__all__ = [
    "ChatMessage",
    "ContextFact",
    "ContextMemory",
    "ContextQuery",
    "ContextRequest",
    "ContextResponse",
    "LeftOut",
    "ProfileMemory",
    "ProfileResponse",
]


class ChatMessage(StrictModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str = Field(max_length=100_000)
    # Who said it, as on /v1/sessions (the block reads the words; accepted so that a
    # platform can send the same messages everywhere).
    name: SpeakerName | None = None
    speaker_id: Identifier | None = None

    @field_validator("content")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("content must not contain NUL characters")
        return value


class ContextQuery(StrictModel):
    """``GET /v1/context``'s query parameters (the POST body without ``history``)."""

    user_id: Identifier | None = None
    query: str
    session_id: Identifier | None = None
    agent_id: Identifier | None = None
    token_budget: int | None = Field(default=None, ge=1)
    top_k: int | None = Field(default=None, ge=1)
    # The day the message is said: "last week" in it is read against this (default today).
    reference_date: date | None = None
    # the candidates left out of the block and the rule that left each out (``left_out``)
    explain: bool = False
    # re-score the candidates before the block's rules: true or a back-end by name
    rerank: bool | Literal["onnx", "llm"] = False

    _query = field_validator("query")(check_content)
    _reference = field_validator("reference_date", mode="before")(reference_day)
    _budget = field_validator("token_budget")(
        at_most("context_token_budget", "token_budget must be at most {limit}")
    )

    _top_k = field_validator("top_k")(at_most("top_k", "top_k must be at most {limit}"))


class ContextRequest(ContextQuery):
    history: list[ChatMessage] | None = None

    _history = field_validator("history")(
        at_most("history_items", "at most {limit} history messages", size=True)
    )


class ContextFact(BaseModel):
    id: UUID
    category: str
    key: str
    value: str
    confidence: float
    importance: float
    updated_at: datetime
    why: str | None = None  # why it is in the block ("profile: constraint", ...)


class ContextMemory(ScoredMemory):
    why: str | None = None  # the evidence that admitted it ("similar to the message ...")
    # its best cosine to the message's parts without their time words (the gate judges
    # the lower of this and ``similarity``); null: the message has no time words (or the
    # lever is off); -1: the search without them did not return it
    topic_similarity: float | None = None


class LeftOut(BaseModel):
    """A candidate the block did not show (``explain``), and the rule that left it out:
    ``gate`` (no evidence from the message), ``top_k``, ``budget`` (no room in the token
    budget), ``dedupe`` (a near-copy of a shown memory), ``profile`` (shown in the profile
    section instead), ``knowledge`` (a chunk past knowledge_top_k or the gate), ``rerank``
    (under the re-scoring back-end's bar, or past the candidates it scored)."""

    id: UUID
    content: str
    type: str | None = None
    rule: str
    detail: str | None = None
    score: float | None = None
    similarity: float | None = None
    rerank_score: float | None = None


class ProfileMemory(Memory):
    """A memory of the user's profile: always in the context block."""

    profile_class: str | None = None  # instruction | constraint | identity
    pinned: bool | None = None  # the owner's override (null: the class decides)
    why: str | None = None


class ContextResponse(BaseModel):
    context: str
    profile: list[ProfileMemory] = Field(default_factory=list)  # shown first, always
    memories: list[ContextMemory]  # retrieved for this message (profile ones not repeated)
    facts: list[ContextFact]
    search_query: str | None = None  # the (expanded) query searched; null: search skipped
    parts: list[str] = Field(default_factory=list)  # the message's parts searched
    tokens: int = 0  # approximate tokens of `context`
    profile_tokens: int = 0  # of which the profile section (counted in the budget)
    # "From the knowledge base": the cited chunks in the block, and their tokens
    knowledge: list[ContextMemory] = Field(default_factory=list)
    knowledge_tokens: int = 0
    left_out: list[LeftOut] | None = None  # explain: what the block did not show, and why
    rerank: RerankInfo | None = None  # only when the request asked for it


class ProfileResponse(BaseModel):
    """GET /v1/users/{user_id}/profile: what every context block of the user starts with
    (before the token cap), and why each item is there."""

    user_id: str
    memories: list[ProfileMemory]
    facts: list[ContextFact]
