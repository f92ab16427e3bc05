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
    # A PDF or HTML file is parsed in a child process (serve_app/documents/sandbox.py):
    # pypdf re-reads a shared content stream for every page and a form XObject for every
    # ``Do``, so a 2 kB file can cost minutes. Over ``parse_cpu_s`` seconds of CPU or
    # ``parse_memory_mb`` of address space the child is killed and the post is a 413.
    parse_cpu_s: int = Field(10, ge=1)
    parse_memory_mb: int = Field(1024, ge=128)
    max_pdf_objects: int = Field(200_000, ge=1)  # cross-reference entries of one PDF
    # Bytes of content streams read (a stream shared by n pages counts n times) and
    # decompressed (every filter, every stream) in one PDF parse.
    max_decoded_bytes: int = Field(128 * 1024 * 1024, ge=1)
    # Elements an HTML page may leave open inside each other: an HTML5 tree builder
    # looks through them at every block start tag, so the parse costs pages x depth.
    max_html_depth: int = Field(512, ge=8)
    # A parse in the child costs one rate unit per ``parse_unit_cpu_s`` of its CPU time
    # (at least one; a parse killed at its limit costs the limit), on top of the chunks.
    parse_unit_cpu_s: float = Field(0.5, gt=0)
    # The chunker's target: min(chunk_tokens, the model's max tokens - 2) tokens per chunk,
    # ``overlap_tokens`` shared with the previous chunk (the seed design's 512/50).
    chunk_tokens: int = Field(512, ge=16)
    overlap_tokens: int = Field(50, ge=0)
    # Chunks per Embedder call (its bulk lane; a job renews its lease after each call).
    # Only the call's size: the Embedder cuts each call into slices of
    # MEMSERVE_EMBED_BULK_SLICE_TOKENS/_TEXTS run after interactive callers (models/lanes.py).
    embed_batch: int = Field(64, ge=1)
    # Documents parsed/chunked/embedded at once per Ingress replica; more wait their turn
    # (so a burst of 300-page PDFs cannot take every thread and the Embedder from
    # other tenants' memory writes).
    concurrent: int = Field(2, ge=1)
    list_limit: int = Field(100, ge=1)  # documents or chunks per page
    # Durable ingest jobs: a post of more chunks than ``sync_chunks`` (or with
    # ``Prefer: respond-async``) is stored as a job after parse+chunk and answered 202;
    # an Extractor replica embeds and writes it (serve_app/services/document_jobs.py).
    sync_chunks: int = Field(128, ge=1)
    jobs_per_tenant: int = Field(20, ge=1)  # open (queued or running) jobs; 429 beyond
    job_concurrency: int = Field(2, ge=1)  # jobs one Extractor replica runs at once
    job_tenant_concurrency: int = Field(1, ge=1)  # jobs of one tenant running (all replicas)
    job_poll_s: float = Field(1.0, ge=0)  # how often a replica looks for jobs (0: never)
    job_lease_s: float = Field(120.0, gt=0)  # renewed per embed slice; a dead worker's expires
    job_max_attempts: int = Field(3, ge=1)  # claims of one job before it is failed
    job_retry_s: float = Field(10.0, ge=0)  # wait after a transient failure (Embedder, DB)
    job_retention_s: float = Field(86_400.0, gt=0)  # finished jobs stay readable this long
