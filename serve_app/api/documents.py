"""/v1/documents: the knowledge base: post (JSON text or a file upload), list,
get with its chunks, delete. Who may do what: serve_app/services/documents.py."""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from serve_app.api.deps import Caller, Svc
from serve_app.api.input_guard import body_problem
from serve_app.errors import ApiError
from serve_app.schemas import Identifier
from serve_app.schemas.documents import (
    CONTENT_TYPES,
    DocumentCreate,
    DocumentDeleted,
    DocumentDetail,
    DocumentInput,
    DocumentJob,
    DocumentList,
    DocumentOut,
    DocumentScope,
)

router = APIRouter(prefix="/v1/documents", tags=["documents"])

# Form fields of a multipart post besides ``file`` (``tags``: repeated or comma-separated;
# ``metadata``: a JSON object).
_FORM_FIELDS = ("document_id", "title", "source_url", "scope", "agent_id", "user_id")
_BY_SUFFIX = {
    ".pdf": "application/pdf",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".txt": "text/plain",
}
_UPLOAD_SCHEMA = {
    "requestBody": {
        "content": {
            "application/json": {"schema": DocumentCreate.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "content_type": {"type": "string", "enum": list(CONTENT_TYPES)},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "metadata": {"type": "string", "description": "a JSON object"},
                        **{f: {"type": "string"} for f in _FORM_FIELDS},
                    },
                }
            },
        },
        "required": True,
    }
}


def _invalid(exc: ValidationError) -> RequestValidationError:
    return RequestValidationError(exc.errors(include_url=False, include_context=False))


async def _from_form(request: Request) -> DocumentInput:
    form = await request.form(max_files=1, max_fields=64)
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(422, "invalid_request", "a multipart post needs a 'file' part")
    data = await upload.read()
    fields: dict[str, Any] = {f: form.get(f) for f in _FORM_FIELDS if form.get(f) not in (None, "")}
    tags = [t for v in form.getlist("tags") if isinstance(v, str) for t in v.split(",")]
    fields["tags"] = [t.strip() for t in tags if t.strip()]
    meta = form.get("metadata")
    if isinstance(meta, str) and meta:
        # A form field skips the input guard (the upload's bytes are not JSON), so the
        # same check runs here: nesting past the JSON reader's recursion and unpaired
        # surrogates PostgreSQL cannot store were 500s.
        problem = body_problem(meta.encode("utf-8", "surrogatepass"))
        if problem is not None:
            raise ApiError(422, "invalid_request", f"metadata: {problem}")
        try:
            fields["metadata"] = json.loads(meta)
        except ValueError:
            raise ApiError(422, "invalid_request", "metadata must be a JSON object") from None
    # The form's content_type, else the file name's suffix (clients send .md and .html
    # as text/plain or octet-stream), else the part's declared type, else plain text.
    name = (upload.filename or "").lower()
    declared = (upload.content_type or "").split(";")[0].strip().lower()
    ctype = (
        form.get("content_type")
        or next((t for s, t in _BY_SUFFIX.items() if name.endswith(s)), None)
        or (declared if declared in CONTENT_TYPES else "text/plain")
    )
    try:
        return DocumentInput(**fields, data=data, content_type=ctype)
    except ValidationError as exc:
        raise _invalid(exc) from None


def prefers_async(header: str | None) -> bool:
    """``Prefer: respond-async`` (RFC 7240: comma-separated preferences, each a token
    with optional ``=value`` and parameters; a plain split, linear in the header)."""
    if not header:
        return False
    prefs = (p.split(";", 1)[0].split("=", 1)[0].strip().lower() for p in header.split(","))
    return "respond-async" in prefs


@router.post(
    "",
    status_code=201,
    response_model=DocumentOut,
    openapi_extra=_UPLOAD_SCHEMA,
    responses={202: {"model": DocumentJob, "description": "accepted as a job"}},
)
async def post_document(request: Request, caller: Caller, services: Svc):
    """A document (JSON ``text``, or a multipart ``file``: text, Markdown, HTML, PDF)
    into scope org, agent or user. Re-posting a ``document_id`` replaces its chunks in one
    transaction (the version goes up; the old version's row is kept). 413 over the
    document bounds (``MEMSERVE_DOC_*``), 422 for a file that cannot be read.

    More than ``MEMSERVE_DOC_SYNC_CHUNKS`` chunks, or ``Prefer: respond-async``: 202 with
    a job (``GET /v1/documents/jobs/{job_id}``) once the document is stored durably; it
    is embedded and written in the background. Its refusals (rights, rate units, chunk
    quota, ``MEMSERVE_DOC_JOBS_PER_TENANT`` open jobs: 429) come before the 202."""
    docs = services.documents
    ctype = request.headers.get("content-type", "").lower()
    if ctype.startswith("multipart/form-data"):
        doc = await _from_form(request)
    else:
        try:
            body = DocumentCreate.model_validate_json(await request.body())
        except ValidationError as exc:
            raise _invalid(exc) from None
        doc = DocumentInput(**body.model_dump())
    user = doc.user_id
    tenant = None if caller.role == "admin" else await services.tenants.effective(caller.tenant_id)
    out = await docs.ingest(
        caller,
        doc,
        charge=lambda units: services.auth.charge(caller, user, units, tenant),
        prefer_async=prefers_async(request.headers.get("prefer")),
    )
    if isinstance(out, dict):  # accepted as a job
        job = DocumentJob.model_validate(out).model_dump(mode="json")
        where = {"Location": f"/v1/documents/jobs/{job['job_id']}"}
        return JSONResponse(job, status_code=202, headers=where)
    return out


@router.get("/jobs/{job_id}", response_model=DocumentJob)
async def get_document_job(
    job_id: UUID, caller: Caller, services: Svc, agent_id: Identifier | None = None
):
    """A document job: ``queued``, ``running`` (``embedded`` of ``chunk_count``),
    ``done`` (the ``version`` it wrote) or ``failed`` (``error``). Who may read it: as
    its document (another user's or tenant's job is a 404)."""
    return await services.documents.job(caller, job_id, agent_id=agent_id)


@router.delete("/jobs/{job_id}", response_model=DocumentJob)
async def cancel_document_job(
    job_id: UUID, caller: Caller, services: Svc, agent_id: Identifier | None = None
):
    """Cancel a queued or running job: nothing of it is written (a document it would
    have replaced keeps its current version). 409 once the job has finished."""
    return await services.documents.cancel_job(caller, job_id, agent_id=agent_id)


@router.get("", response_model=DocumentList)
async def list_documents(
    caller: Caller,
    services: Svc,
    scope: DocumentScope | None = None,
    agent_id: Identifier | None = None,
    user_id: Identifier | None = None,
    tag: Annotated[str | None, Query(max_length=64, pattern=r"^[^\x00]*$")] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
):
    """The documents the caller may read, newest first: a user key sees its tenant's org
    documents, its own, and an agent's with that ``agent_id``."""
    return await services.documents.list(
        caller, scope=scope, agent_id=agent_id, user_id=user_id, tag=tag, cursor=cursor, limit=limit
    )


@router.get("/{document_id}", response_model=DocumentDetail)
async def get_document(
    document_id: Identifier,
    caller: Caller,
    services: Svc,
    agent_id: Identifier | None = None,
    cursor: Annotated[str | None, Query(pattern=r"^-?[0-9]{1,9}$")] = None,
    limit: Annotated[int | None, Query(ge=1)] = None,
):
    """The document and a page of its chunks in order (``cursor``: the last page's
    ``next_cursor``)."""
    after = int(cursor) if cursor is not None else -1
    return await services.documents.get(
        caller, document_id, agent_id=agent_id, after=after, limit=limit
    )


@router.delete("/{document_id}", response_model=DocumentDeleted)
async def delete_document(
    document_id: Identifier, caller: Caller, services: Svc, agent_id: Identifier | None = None
):
    """Delete the document, its chunks (and their vectors) and its version rows."""
    return await services.documents.delete(caller, document_id, agent_id=agent_id)
