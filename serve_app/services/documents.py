"""The knowledge base's use cases: ingest (post and re-post), list, get, delete documents.

Who may do what (issue 33): org and agent documents are written by service and admin
keys only (a user key: 403) and read by every key of the tenant (an agent's only with
that ``agent_id``); a user's documents are written and read by that user's key or a
service key naming the user. Anything a caller may not read is a 404, as if missing.

An ingest parses and chunks in a worker thread, embeds the chunks through the same
Embedder as memories in batches of ``MEMSERVE_DOC_EMBED_BATCH`` (each batch queues
with every other tenant's writes instead of one call holding the Embedder), and only
then opens one short transaction: lock the document id, delete the old version's
chunks, add the new ones through the :class:`GuardedWriter` (quotas count chunks;
erasure guard; history), write the head and the version row. Readers see the old
version or the new, never a mix. At most ``MEMSERVE_DOC_CONCURRENT`` documents are
processed at once per Ingress replica, so big uploads take turns while small memory
writes are never queued behind them (they do not take this semaphore).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.auth import Principal, check_user_id, resolve_owner
from serve_app.documents.chunking import Chunk, ChunkSizes, chunk, load_tokenizer, sizes_for
from serve_app.documents.parse import DocumentRefused, Limits, parse
from serve_app.errors import ApiError
from serve_app.model_facts import ModelFacts
from serve_app.schemas.documents import DocumentInput
from serve_app.services.memories import SHARED_WRITERS, Embed
from serve_app.services.write_errors import write_errors
from serve_app.settings import DocumentSettings, Settings
from serve_app.store import events
from serve_app.store.documents import CHUNK_SOURCE, CHUNK_TYPE, DocumentStore
from serve_app.store.guarded import ForgetInProgress, GuardedWriter
from serve_app.store.records import NewMemory, Owner, owner_key

__all__ = ["DocumentService", "document_service"]

Tokenizer = Callable[[], Any]  # the active model's tokenizer (loaded once, lazily)
Charge = Callable[[float], None]  # spends rate units of the caller (429 when out)


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


class DocumentService:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        writer: GuardedWriter,
        embed: Embed,
        tokenizer: Tokenizer,
        settings: DocumentSettings,
        sizes: ChunkSizes | Callable[[], ChunkSizes],
    ) -> None:
        """``sizes``: chunk sizes the active model allows (:func:`chunking.sizes_for`), or
        what gives them on the first document (the model's spec is read then)."""
        self.pool = pool
        self.store = DocumentStore(pool)
        self.writer = writer
        self.embed = embed
        self.tokenizer = tokenizer
        self.settings = settings
        self.sizes = sizes
        self.limits = Limits(max_chars=settings.max_chars, max_pdf_pages=settings.max_pdf_pages)
        self._turns = asyncio.Semaphore(settings.concurrent)

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

    # ---------- ingest ----------

    async def ingest(
        self, principal: Principal, doc: DocumentInput, *, charge: Charge | None = None
    ) -> dict[str, Any]:
        """Store ``doc`` as the new version of its id (a new document without one);
        ``charge``: spends one rate unit per chunk before anything is embedded."""
        owner = self._owner(principal, doc)
        document_id = doc.document_id or uuid.uuid4().hex
        async with self._turns:
            text, chunks, title = await asyncio.to_thread(self._prepare, doc)
            if charge is not None:
                charge(float(len(chunks)))
            vectors = await self._embed([c.text for c in chunks])
        head = {
            "document_id": document_id,
            "owner": owner_key(owner.user_id, doc.scope, doc.agent_id),
            "scope": doc.scope,
            "agent_id": doc.agent_id,
            "user_id": owner.user_id,
            "title": doc.title or title,
            "source_url": doc.source_url,
            "content_type": doc.content_type,
            "metadata": doc.metadata,
            "tags": doc.tags,
            "content_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "chars": len(text),
            "chunk_count": len(chunks),
        }
        with write_errors():
            return await self._swap(principal, owner, head, chunks, vectors)

    def _prepare(self, doc: DocumentInput) -> tuple[str, list[Chunk], str | None]:
        """Parse and chunk (CPU work: runs in a worker thread)."""
        try:
            parsed = parse(doc.content_type, text=doc.text, data=doc.data, limits=self.limits)
            sizes = self.sizes if isinstance(self.sizes, ChunkSizes) else self.sizes()
            chunks = chunk(parsed, self.tokenizer(), sizes, self.settings.max_chunks)
        except DocumentRefused as exc:
            code = "payload_too_large" if exc.status == 413 else "invalid_document"
            raise ApiError(exc.status, code, str(exc)) from None
        return parsed.text, chunks, parsed.title

    async def _embed(self, texts: list[str]) -> np.ndarray:
        step = self.settings.embed_batch
        parts = [
            np.asarray(await self.embed(texts[i : i + step], is_query=False), dtype=np.float32)
            for i in range(0, len(texts), step)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    async def _swap(
        self,
        caller: Principal,
        owner: Owner,
        head: dict[str, Any],
        chunks: list[Chunk],
        vectors: np.ndarray,
    ) -> dict[str, Any]:
        """Replace the document's chunks and head in one transaction."""
        tenant, document_id = caller.tenant_id, head["document_id"]
        async with self.pool.connection() as conn, conn.transaction():
            old = await self.store.lock(conn, tenant, document_id)
            if old is not None and not self._writable(caller, old):
                if self._readable(caller, old, head["agent_id"]):
                    raise ApiError(403, "forbidden", "this key may not replace that document")
                raise ApiError(409, "conflict", f"document_id {document_id!r} is taken")
            version = 1 if old is None else old["version"] + 1
            await conn.execute(events.QUIET)  # one document event, not one per chunk
            await self.store.remove_chunks(conn, tenant, document_id, caller.actor)
            items = [self._chunk_row(head, version, c) for c in chunks]
            rows = await self.writer.add(owner, items, vectors, actor=caller.actor, conn=conn)
            if len(rows) != len(items):
                raise ForgetInProgress(owner)
            saved = await self.store.save_head(conn, tenant, head, caller.actor)
            await conn.execute(events.LOUD)
            await events.emit(
                conn, tenant, "document.ingested", user_id=owner.user_id,
                agent_id=head["agent_id"],
                data={"document_id": document_id, "version": saved["version"],
                      "chunk_count": len(items), "scope": head["scope"]},
            )  # fmt: skip
        return saved

    @staticmethod
    def _chunk_row(head: dict[str, Any], version: int, c: Chunk) -> NewMemory:
        return NewMemory(
            content=c.text,
            type=CHUNK_TYPE,
            scope=head["scope"],
            agent_id=head["agent_id"],
            tags=list(head["tags"]),
            metadata=dict(head["metadata"]),
            data={
                "document_id": head["document_id"],
                "version": version,
                "chunk_index": c.index,
                "char_start": c.char_start,
                "char_end": c.char_end,
                "heading_path": list(c.heading_path),
                "title": head["title"],
                "source_url": head["source_url"],
            },
            source=CHUNK_SOURCE,
            pinned=False,  # never in a user's profile block
        )

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


def document_service(
    pool: AsyncConnectionPool,
    writer: GuardedWriter,
    embed: Embed,
    settings: Settings,
    model: ModelFacts,
) -> DocumentService:
    """The service for the active model: its tokenizer (loaded on the first document,
    in the worker thread) and the chunk sizes its window allows."""
    from models.resolve import get_spec

    d = settings.documents

    def sizes() -> ChunkSizes:
        spec = get_spec(model.ref, settings.models_dir)
        return sizes_for(
            spec.max_tokens, d.chunk_tokens, d.overlap_tokens, settings.limits.content_chars
        )

    return DocumentService(
        pool, writer, embed, lambda: load_tokenizer(model.ref, settings.models_dir), d, sizes
    )
