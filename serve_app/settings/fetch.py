"""Fetching documents named by URL (mem0's ``pdf_url``/``mdx_url``/``txt_url`` messages)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import group


class FetchSettings(BaseSettings):
    """Caps of one outbound document fetch (serve_app/documents/fetch.py).

    A caller names the URL, so the fetch is bounded in every way a stranger could
    stretch it: bytes, time, redirects and how many run at once per replica.
    """

    model_config = group("MEMSERVE_FETCH_")

    max_bytes: int = Field(20 * 1024 * 1024, ge=1024)  # a longer body is aborted: 413
    timeout_s: float = Field(15.0, gt=0, le=300)  # whole fetch: resolve, connect, every hop
    max_redirects: int = Field(3, ge=0, le=10)  # hops to public targets, each re-checked
    max_concurrent: int = Field(4, ge=1)  # fetches in flight per replica
    # Document parts (URLs, data URLs, base64) of one mem0 add: more is a 413 before any
    # is read, so one small request cannot make hundreds of fetches.
    max_document_parts: int = Field(8, ge=1, le=100)
    # Bytes of fetched documents a replica holds at once, across requests (a fetch counts
    # at max_bytes until read, then at its size until its request is done); a fetch that
    # does not fit is a 503 with Retry-After instead of more memory.
    max_bytes_in_flight: int = Field(128 * 1024 * 1024, ge=1024)
    # Targets that resolve to private, loopback, link-local, multicast or reserved
    # addresses are refused unless in one of these networks (CIDR), e.g. a document
    # server inside the operator's network.
    allowed_networks: list[str] = Field(default_factory=list)
    # Any address at all: development and the tests' local servers only, never production.
    allow_private: bool = False
