"""The knowledge base's documents: what one document may be, and how it is chunked."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import group


class DocumentSettings(BaseSettings):
    """Bounds of ``POST /v1/documents`` (413 beyond) and the chunker's sizes."""

    model_config = group("MEMSERVE_DOC_")

    max_bytes: int = Field(20 * 1024 * 1024, ge=1)  # request body of a document post
    max_chars: int = Field(4_000_000, ge=1)  # extracted text of one document
    max_pdf_pages: int = Field(1000, ge=1)
    max_chunks: int = Field(5000, ge=1)  # chunks of one document
    # The chunker's target: min(chunk_tokens, the model's max tokens - 2) tokens per chunk,
    # ``overlap_tokens`` shared with the previous chunk (the seed design's 512/50).
    chunk_tokens: int = Field(512, ge=16)
    overlap_tokens: int = Field(50, ge=0)
    # Chunks embedded per Embedder call: a big document is many calls, each one batch
    # that queues with every other tenant's writes instead of one call holding the
    # Embedder for the whole document.
    embed_batch: int = Field(64, ge=1)
    # Documents parsed/chunked/embedded at once per Ingress replica; more wait their turn
    # (so a burst of 300-page PDFs cannot take every thread and the Embedder from
    # other tenants' memory writes).
    concurrent: int = Field(2, ge=1)
    list_limit: int = Field(100, ge=1)  # documents or chunks per page
