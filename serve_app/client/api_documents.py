"""``DocumentsApi``: the knowledge base's documents (``/v1/documents``; see ``api``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serve_app.client.call import Call, clean, with_params
from serve_app.client.endpoint import Endpoint
from serve_app.schemas.documents import (
    DocumentDeleted,
    DocumentDetail,
    DocumentJob,
    DocumentList,
    DocumentOut,
)

# A post answered 202 (a big document, or ``respond_async``) is a job, not the head yet.
_ASYNC = {202: DocumentJob}
_PREFER_ASYNC = {"Prefer": "respond-async"}


class DocumentsApi:
    """Post (text or a file), list, read and delete documents."""

    @Endpoint
    @staticmethod
    def add_document(
        text: str, *, content_type: str = "text/plain", respond_async: bool = False, **fields: Any
    ) -> Call[DocumentOut | DocumentJob]:
        """A document's text (``content_type`` text/plain, text/markdown or text/html).
        ``fields``: document_id (re-posting one replaces it), title, source_url, metadata,
        tags, scope ("org" by default, "agent" with agent_id, "user" with user_id).
        A big document (or ``respond_async``) comes back as a :class:`DocumentJob`."""
        body = clean({**fields, "text": text, "content_type": content_type})
        return Call(
            "POST",
            "/v1/documents",
            json=body,
            model=DocumentOut,
            by_status=_ASYNC,
            headers=_PREFER_ASYNC if respond_async else None,
        )

    @Endpoint
    @staticmethod
    def upload_document(
        file: str | Path | bytes,
        *,
        filename: str | None = None,
        content_type: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        respond_async: bool = False,
        **fields: Any,
    ) -> Call[DocumentOut | DocumentJob]:
        """A file (a path or its bytes: PDF, Markdown, HTML, text) as a multipart post;
        the type is ``content_type`` or guessed by the service from the file name. A big
        document (or ``respond_async``) comes back as a :class:`DocumentJob`."""
        if isinstance(file, bytes):
            data, name = file, filename or "document"
        else:
            data, name = Path(file).read_bytes(), filename or Path(file).name
        form: dict[str, Any] = {k: str(v) for k, v in clean(fields).items()}
        if content_type is not None:
            form["content_type"] = content_type
        if tags:
            form["tags"] = list(tags)
        if metadata is not None:
            form["metadata"] = json.dumps(metadata)
        files = {"file": (name, data, content_type or "application/octet-stream")}
        return Call(
            "POST",
            "/v1/documents",
            files=files,
            form=form,
            model=DocumentOut,
            by_status=_ASYNC,
            headers=_PREFER_ASYNC if respond_async else None,
        )

    @Endpoint
    @staticmethod
    def document_job(job_id: str, *, agent_id: str | None = None) -> Call[DocumentJob]:
        """A document job's state (queued, running, done with its version, or failed)."""
        params = {"agent_id": agent_id}
        return with_params("GET", f"/v1/documents/jobs/{job_id}", params, DocumentJob)

    @Endpoint
    @staticmethod
    def cancel_document_job(job_id: str, *, agent_id: str | None = None) -> Call[DocumentJob]:
        """Cancel a queued or running document job (409 once it has finished)."""
        params = {"agent_id": agent_id}
        return with_params("DELETE", f"/v1/documents/jobs/{job_id}", params, DocumentJob)

    @Endpoint
    @staticmethod
    def documents(
        *,
        scope: str | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        tag: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Call[DocumentList]:
        params = {
            "scope": scope,
            "agent_id": agent_id,
            "user_id": user_id,
            "tag": tag,
            "cursor": cursor,
            "limit": limit,
        }
        return with_params("GET", "/v1/documents", params, DocumentList)

    @Endpoint
    @staticmethod
    def document(
        document_id: str,
        *,
        agent_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Call[DocumentDetail]:
        """The document and a page of its chunks (``cursor``: the last ``next_cursor``)."""
        params = {"agent_id": agent_id, "cursor": cursor, "limit": limit}
        return with_params("GET", f"/v1/documents/{document_id}", params, DocumentDetail)

    @Endpoint
    @staticmethod
    def delete_document(document_id: str, *, agent_id: str | None = None) -> Call[DocumentDeleted]:
        params = {"agent_id": agent_id}
        return with_params("DELETE", f"/v1/documents/{document_id}", params, DocumentDeleted)
