"""Documents of the knowledge base: what a post carries and what the routes answer.

A document is posted as JSON (``text``) or as a multipart file upload (``data``); both
become one :class:`DocumentInput`, validated here before anything is parsed or stored.
Its chunks are memory rows of type ``document_chunk`` (serve_app/services/documents.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from serve_app.schemas.memories import (
    NO_NUL,
    Identifier,
    StrictModel,
    _check_metadata,
    _check_tags,
)

DocumentScope = Literal["org", "agent", "user"]
TEXT_TYPES = ("text/plain", "text/markdown", "text/html")
CONTENT_TYPES = (*TEXT_TYPES, "application/pdf")
ContentType = Literal["text/plain", "text/markdown", "text/html", "application/pdf"]


class DocumentFields(StrictModel):
    """What every document post names besides its content."""

    document_id: Identifier | None = None  # None: a new id is generated
    title: str | None = Field(default=None, max_length=512, pattern=NO_NUL)
    source_url: str | None = Field(default=None, max_length=2048, pattern=NO_NUL)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    scope: DocumentScope = "org"
    agent_id: Identifier | None = None
    user_id: Identifier | None = None

    _tags = field_validator("tags")(_check_tags)
    _metadata = field_validator("metadata")(_check_metadata)

    @model_validator(mode="after")
    def _owner_named(self) -> DocumentFields:
        if self.scope == "agent" and not self.agent_id:
            raise ValueError("an agent document needs agent_id")
        if self.scope != "agent" and self.agent_id is not None:
            raise ValueError("agent_id belongs to scope 'agent'")
        if self.scope != "user" and self.user_id is not None:
            raise ValueError("user_id belongs to scope 'user'")
        return self


class DocumentCreate(DocumentFields):
    """``POST /v1/documents`` with a JSON body: the document's text."""

    text: str = Field(min_length=1, pattern=NO_NUL)
    content_type: Literal["text/plain", "text/markdown", "text/html"] = "text/plain"


class DocumentInput(DocumentFields):
    """One document to ingest: ``text`` (a text type) or ``data`` (bytes of any type,
    a PDF only as bytes)."""

    text: str | None = None
    data: bytes | None = None
    content_type: ContentType = "text/plain"

    @model_validator(mode="after")
    def _one_content(self) -> DocumentInput:
        if (self.text is None) == (self.data is None):
            raise ValueError("send the document as text or as a file, not both")
        if self.text is not None and self.content_type == "application/pdf":
            raise ValueError("a PDF is sent as a file upload")
        return self


class DocumentOut(StrictModel):
    """A document's head: the version its chunks carry."""

    document_id: str
    version: int
    owner: str  # '@org', '@agent:<id>' or the user id (the chunks' owner)
    title: str | None = None
    source_url: str | None = None
    scope: DocumentScope
    agent_id: str | None = None
    user_id: str | None = None
    content_type: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    content_sha256: str
    chars: int
    chunk_count: int
    created_at: datetime
    updated_at: datetime


class DocumentJob(StrictModel):
    """A document accepted as a job (202) and its state (``GET /v1/documents/jobs/{id}``):
    queued, running (``embedded`` of ``chunk_count`` so far), done (``version`` written),
    failed (``error`` says why) or cancelled (``DELETE /v1/documents/jobs/{id}``)."""

    job_id: str
    document_id: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    chunk_count: int
    embedded: int = 0
    attempts: int = 0
    error: str | None = None
    version: int | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class DocumentChunk(StrictModel):
    """One chunk as ``GET /v1/documents/{id}`` lists it (a citable piece of the text)."""

    id: str
    chunk_index: int
    content: str
    char_start: int
    char_end: int
    heading_path: list[str] = Field(default_factory=list)


class DocumentList(StrictModel):
    documents: list[DocumentOut]
    next_cursor: str | None = None


class DocumentDetail(StrictModel):
    document: DocumentOut
    chunks: list[DocumentChunk]
    next_cursor: str | None = None


class DocumentDeleted(StrictModel):
    document_id: str
    deleted: bool
    chunks: int


class ExportedChunk(StrictModel):
    """A chunk as an export carries it (the text as it was cut, and where it came from)."""

    chunk_index: int = Field(ge=0)
    content: str = Field(min_length=1, max_length=64_000, pattern=NO_NUL)
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    heading_path: list[str] = Field(default_factory=list, max_length=16)


class ExportedDocument(DocumentFields):
    """``{"kind": "document", ...}`` of an export: a user's document with its chunks; an
    import stores the chunks as they are (re-embedded), not re-chunked."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)  # an export's head fields

    kind: Literal["document"] = "document"
    document_id: Identifier
    scope: Literal["user"] = "user"
    content_type: ContentType = "text/plain"
    content_sha256: str = Field(default="", max_length=64)
    chars: int = Field(default=0, ge=0)
    chunks: list[ExportedChunk] = Field(min_length=1, max_length=100_000)
