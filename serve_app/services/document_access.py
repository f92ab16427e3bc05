"""Who may read and write which knowledge-base document, and the reads.

Org and agent documents are written by service and admin keys only (a user key: 403)
and read by every key of the tenant (an agent's only with that ``agent_id``); a user's
documents are written and read by that user's key or a service key naming the user.
Anything a caller may not read is a 404, as if missing; a document job is
read under the same rule as its document.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime
from typing import Any

from serve_app.auth import Principal, check_user_id, resolve_owner
from serve_app.documents.jobs import job_view
from serve_app.errors import ApiError
from serve_app.schemas.documents import DocumentInput
from serve_app.services.memories import SHARED_WRITERS
from serve_app.settings import DocumentSettings
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.documents import DocumentStore
from serve_app.store.records import Owner, owner_key

__all__ = ["DocumentAccess"]


def _not_found(document_id: str) -> ApiError:
    return ApiError(404, "not_found", f"document {document_id!r} not found")


def _cursor(row: dict[str, Any]) -> str:
    raw = json.dumps([row["updated_at"].isoformat(), row["document_id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uncursor(token: str) -> tuple[str, str]:
    try:
        at, doc = json.loads(base64.urlsafe_b64decode((token + "=" * (-len(token) % 4)).encode()))
        datetime.fromisoformat(at)
        return str(at), str(doc)
    except Exception:  # any malformed cursor is the caller's error
        raise ApiError(422, "invalid_request", "invalid cursor") from None


class DocumentAccess:
    """Who may read and write which document, and the reads (list, get, delete, a job's
    state); :class:`DocumentService` adds ingestion. Expects ``store``, ``jobs`` and
    ``settings`` on the instance."""

    store: DocumentStore
    jobs: DocumentJobStore
    settings: DocumentSettings

    # ---------- who may do what ----------

    @staticmethod
    def _owner(caller: Principal, doc: DocumentInput) -> Owner:
        if doc.scope in ("org", "agent"):
            if caller.role not in SHARED_WRITERS:
                raise ApiError(
                    403, "forbidden", "org and agent documents are written by service keys only"
                )
            return Owner(caller.tenant_id, None)
        return resolve_owner(caller, doc.user_id)

    @staticmethod
    def _readable(caller: Principal, head: dict[str, Any], agent_id: str | None) -> bool:
        if caller.role in SHARED_WRITERS:
            return True
        owner = head["owner"]
        return (
            owner == "@org"
            or owner == caller.user_id
            or (agent_id is not None and owner == owner_key(None, "agent", agent_id))
        )

    @staticmethod
    def _writable(caller: Principal, head: dict[str, Any]) -> bool:
        return caller.role in SHARED_WRITERS or head["owner"] == caller.user_id

    @staticmethod
    def _check_replace(caller: Principal, old: dict[str, Any] | None, head: dict[str, Any]) -> None:
        """403/409 unless the id is free or ``caller`` may replace its document."""
        if old is not None and not DocumentAccess._writable(caller, old):
            if DocumentAccess._readable(caller, old, head["agent_id"]):
                raise ApiError(403, "forbidden", "this key may not replace that document")
            raise ApiError(409, "conflict", f"document_id {head['document_id']!r} is taken")

    # ---------- reads ----------

    async def list(
        self,
        caller: Principal,
        *,
        scope: str | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        tag: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """A page of the documents the caller may read, newest first (filters narrow it)."""
        check_user_id(user_id)
        limit = min(limit or self.settings.list_limit, self.settings.list_limit)
        owners = self._list_owners(caller, scope, agent_id, user_id)
        after = _uncursor(cursor) if cursor else None
        rows = await self.store.list(
            caller.tenant_id, owners, scope=scope, tag=tag, after=after, limit=limit + 1
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return {"documents": rows, "next_cursor": _cursor(rows[-1]) if more else None}

    @staticmethod
    def _list_owners(
        caller: Principal, scope: str | None, agent_id: str | None, user_id: str | None
    ) -> list[str] | None:
        """The owners a list may show (None: all of the tenant's, service keys only)."""
        agent = [owner_key(None, "agent", agent_id)] if agent_id else []
        if caller.role == "user":
            if user_id is not None and user_id != caller.user_id:
                raise ApiError(403, "forbidden", "a user key may only act for its own user")
            mine = {"org": ["@org"], "agent": agent, "user": [caller.user_id]}
            if scope is not None:
                return [o for o in mine[scope] if o]
            return ["@org", *agent, str(caller.user_id)]
        if user_id is not None:
            return [user_id]
        if agent_id is not None:
            return agent
        return None

    async def get(
        self,
        caller: Principal,
        document_id: str,
        *,
        agent_id: str | None = None,
        after: int = -1,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """The document's head and a page of its chunks (``chunk_index`` > ``after``)."""
        head = await self.store.head(caller.tenant_id, document_id)
        if head is None or not self._readable(caller, head, agent_id):
            raise _not_found(document_id)
        limit = min(limit or self.settings.list_limit, self.settings.list_limit)
        rows = await self.store.chunks(caller.tenant_id, document_id, after=after, limit=limit + 1)
        more = len(rows) > limit
        chunks = [
            {
                "id": str(r["id"]),
                "content": r["content"],
                "chunk_index": r["data"].get("chunk_index", 0),
                "char_start": r["data"].get("char_start", 0),
                "char_end": r["data"].get("char_end", 0),
                "heading_path": r["data"].get("heading_path") or [],
            }
            for r in rows[:limit]
        ]
        return {
            "document": head,
            "chunks": chunks,
            "next_cursor": str(chunks[-1]["chunk_index"]) if more else None,
        }

    async def delete(
        self, caller: Principal, document_id: str, *, agent_id: str | None = None
    ) -> dict[str, Any]:
        """Delete the document, its chunks and its versions (404 if not readable, 403 if
        readable but not the caller's to delete)."""
        head = await self.store.head(caller.tenant_id, document_id)
        if head is None or not self._readable(caller, head, agent_id):
            raise _not_found(document_id)
        if not self._writable(caller, head):
            raise ApiError(403, "forbidden", "this key may not delete that document")
        n = await self.store.delete(caller.tenant_id, document_id, caller.actor)
        if n is None:
            raise _not_found(document_id)
        return {"document_id": document_id, "deleted": True, "chunks": n}

    async def job(
        self, caller: Principal, job_id: uuid.UUID, *, agent_id: str | None = None
    ) -> dict[str, Any]:
        """A job's state, if the caller may read its document (else 404, as missing)."""
        return job_view(await self._job(caller, job_id, agent_id))

    async def cancel_job(
        self, caller: Principal, job_id: uuid.UUID, *, agent_id: str | None = None
    ) -> dict[str, Any]:
        """Cancel a queued or running job (404 as :meth:`job`, 403 if the caller may read
        but not write its document, 409 once it has finished): nothing of it is written."""
        row = await self._job(caller, job_id, agent_id)
        if not self._writable(caller, row):
            raise ApiError(403, "forbidden", "this key may not cancel that document job")
        cancelled = await self.jobs.cancel(caller.tenant_id, job_id)
        if cancelled is None:
            now = await self._job(caller, job_id, agent_id)
            raise ApiError(409, "conflict", f"document job {str(job_id)!r} is {now['status']}")
        return job_view(cancelled)

    async def _job(
        self, caller: Principal, job_id: uuid.UUID, agent_id: str | None
    ) -> dict[str, Any]:
        row = await self.jobs.get(caller.tenant_id, job_id)
        if row is None or not self._readable(caller, row, agent_id):
            raise ApiError(404, "not_found", f"document job {str(job_id)!r} not found")
        return row
