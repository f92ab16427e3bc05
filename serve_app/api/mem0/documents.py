"""mem0's multimodal add messages: documents become knowledge-base documents.

mem0 clients put a document in a message's ``content`` as ``{"type": "pdf_url",
"pdf_url": {"url": ...}}`` (also ``mdx_url`` for Markdown, ``txt_url`` for plain
text), or as one part of an OpenAI-style list of parts; ``url`` is an http(s) URL, a
``data:`` URL or bare base64. Each is read (``serve_app.documents.fetch``: SSRF-safe,
bounded) and ingested through ``DocumentService.ingest`` into the scope the add's ids
name: the user's, an agent's (a service key naming only an agent) or the tenant's org
knowledge (a service key naming neither). The id is derived from the URL (or the inline
bytes), so adding the same URL again (to the same owner) posts a new version of that document.

Images (``image_url``) need a vision model to become text, which memserve does not run:
they are a clear 422 that says so, not a schema error.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from serve_app.api.mem0.scope import Scope
from serve_app.auth import Principal
from serve_app.errors import ApiError
from serve_app.schemas.documents import DocumentInput, DocumentOut
from serve_app.schemas.memories import speaker_name
from serve_app.services.memories import SHARED_WRITERS

# mem0's document part types and what their bytes are.
DOCUMENT_TYPES = {"pdf_url": "application/pdf", "mdx_url": "text/markdown", "txt_url": "text/plain"}
# Where mem0 ids (uuid5) of added documents live.
_NAMESPACE = uuid.UUID("0b9c7a36-3c1e-5d2e-9f55-6d0c2f6a1d33")
_SHOWN_URL = 200  # characters of a URL in an answer


@dataclass(frozen=True)
class DocumentPart:
    kind: str  # a DOCUMENT_TYPES key
    ref: str  # an http(s) URL, a data: URL or base64


def no_vision() -> ApiError:
    return ApiError(
        422,
        "vision_model_required",
        "image messages (image_url) need a vision model to be described, and memserve has "
        "none configured: send the image's description as text, or a document "
        "(pdf_url, mdx_url, txt_url)",
    )


def _part(part: Any, where: str) -> str | DocumentPart:
    """One content part: its text, or the document it names."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise ApiError(422, "invalid_request", f"{where}: a content part is an object with a type")
    kind = part["type"]
    if kind == "text" and isinstance(part.get("text"), str):
        return part["text"]
    if kind in ("image_url", "image"):
        raise no_vision()
    if kind in DOCUMENT_TYPES:
        inner = part.get(kind)
        url = inner.get("url") if isinstance(inner, dict) else None
        if not isinstance(url, str) or not url.strip():
            raise ApiError(422, "invalid_request", f"{where}: {kind} needs {kind}.url")
        return DocumentPart(kind, url)
    raise ApiError(
        422,
        "invalid_request",
        f"{where}: content type {kind[:40]!r} is not supported (text, pdf_url, mdx_url, txt_url)",
    )


def split_messages(messages: list[Any]) -> tuple[list[tuple[str, str]], list[DocumentPart]]:
    """The add's text messages (role, text) and its documents, every message checked
    before anything is read or written (one image anywhere refuses the whole add)."""
    texts: list[tuple[str, str]] = []
    documents: list[DocumentPart] = []
    for i, message in enumerate(messages):
        content = message.content
        parts = [content] if isinstance(content, str | dict) else content
        words: list[str] = []
        for part in parts:
            got = part if isinstance(part, str) else _part(part, f"messages.{i}.content")
            if isinstance(got, DocumentPart):
                documents.append(got)
            else:
                words.append(got)
        if words and message.role != "system":
            said = " ".join(words)
            name = speaker_name(message.name)
            texts.append((message.role, f"{name}: {said}" if name else said))
    return texts, documents


def _scope_fields(caller: Principal, scope: Scope) -> dict[str, Any]:
    """Where the add's documents go: the named user's, else (service keys) the named
    agent's, else the tenant's org knowledge. Rights are the document service's."""
    if scope.user_id is not None or caller.role not in SHARED_WRITERS:
        return {"scope": "user", "user_id": scope.user_id}
    if scope.agent_id is not None:
        return {"scope": "agent", "agent_id": scope.agent_id}
    return {"scope": "org"}


def document_input(
    caller: Principal,
    scope: Scope,
    part: DocumentPart,
    data: bytes,
    metadata: dict[str, Any] | None,
) -> DocumentInput:
    """The document to ingest for one part whose bytes were read."""
    is_url = part.ref[:7].lower() == "http://" or part.ref[:8].lower() == "https://"
    key = part.ref if is_url else hashlib.sha256(data).hexdigest()
    title = None
    if is_url:
        with contextlib.suppress(ValueError):  # a URL the fetch will refuse with a 422
            title = urlsplit(part.ref).path.rstrip("/").rsplit("/", 1)[-1][:512] or None
    where = _scope_fields(caller, scope)
    # Document ids are unique per tenant: the owner is part of the id, so two users (or
    # an agent and the org) adding the same URL get two documents, not one moved.
    owner = where.get("user_id") or caller.user_id or where.get("agent_id") or "@org"
    fields = {
        "document_id": str(uuid.uuid5(_NAMESPACE, f"{where['scope']}\x00{owner}\x00{key}")),
        "title": title,
        "source_url": part.ref if is_url else None,
        "metadata": {**(metadata or {}), "mem0_type": part.kind},
        "data": data,
        "content_type": DOCUMENT_TYPES[part.kind],
        **where,
    }
    try:
        return DocumentInput.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "document"
        raise ApiError(422, "invalid_request", f"{where}: {first.get('msg')}") from None


def added(part: DocumentPart, ingested: DocumentOut) -> dict[str, Any]:
    """An ingested document in mem0's add-result shape (the document's id as the memory
    id; ``document`` carries the knowledge base's head)."""
    out = ingested.model_dump()
    shown = out.get("title") or (part.ref[:_SHOWN_URL] if out.get("source_url") else "document")
    text = f"Document {shown}: {out['chunk_count']} chunks (version {out['version']})"
    return {
        "id": out["document_id"],
        "event": "ADD" if out["version"] == 1 else "UPDATE",
        "memory": text,
        "data": {"memory": text},
        "document": {
            k: out.get(k)
            for k in (
                "document_id",
                "version",
                "title",
                "scope",
                "agent_id",
                "user_id",
                "source_url",
                "content_type",
                "chunk_count",
            )
        },
    }
