"""The knowledge base's ingestion: post and re-post documents (reads and who may do
what: serve_app/services/document_access.py).

An ingest parses and chunks in a worker thread (a PDF or HTML file parsed in a child
process with CPU and memory limits: serve_app/documents/sandbox.py; the parse costs rate
units by its CPU time, refused or not, before anything else is charged), embeds the
chunks through the same Embedder as memories, in calls of ``MEMSERVE_DOC_EMBED_BATCH``
chunks in its bulk lane (the Embedder slices each call and runs a slice only when no
interactive caller waits: ``models/lanes.py``, so other tenants' writes go first), and
only then opens one short transaction: lock the document id, delete the old version's
chunks, add the new ones through the :class:`GuardedWriter` (quotas count chunks;
erasure guard; history), write the head and the version row. Readers see the old
version or the new, never a mix. At most ``MEMSERVE_DOC_CONCURRENT`` documents are
processed at once per Ingress replica, so big uploads take turns while small memory
writes are never queued behind them (they do not take this semaphore). A big document
(over ``MEMSERVE_DOC_SYNC_CHUNKS`` chunks) is not embedded in the request: it is
accepted as a durable job (202) that an Extractor replica writes with the same swap
(serve_app/services/document_jobs.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from serve_app.auth import Principal
from serve_app.documents.chunking import Chunk, ChunkSizes, chunk, load_tokenizer, sizes_for
from serve_app.documents.jobs import JobLost, job_view, stored_chunks
from serve_app.documents.parse import DocumentRefused, Limits
from serve_app.documents.sandbox import Box, Refused, parse_bounded, units
from serve_app.errors import ApiError
from serve_app.model_facts import ModelFacts
from serve_app.schemas.documents import DocumentInput, DocumentOut, ExportedDocument
from serve_app.services.backends import Embed
from serve_app.services.document_access import DocumentAccess
from serve_app.services.write_errors import write_errors
from serve_app.settings import DocumentSettings, Settings
from serve_app.store import events
from serve_app.store.document_jobs import DocumentJobStore
from serve_app.store.documents import CHUNK_SOURCE, CHUNK_TYPE, DocumentStore
from serve_app.store.guarded import ForgetInProgress, GuardedWriter
from serve_app.store.records import NewMemory, Owner, owner_key

__all__ = ["DocumentService", "document_service"]

Tokenizer = Callable[[], Any]  # the active model's tokenizer (loaded once, lazily)
Charge = Callable[[float], None]  # spends rate units of the caller (429 when out)


class DocumentService(DocumentAccess):
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
        self.limits = Limits(
            max_chars=settings.max_chars,
            max_pdf_pages=settings.max_pdf_pages,
            max_pdf_objects=settings.max_pdf_objects,
            max_decoded_bytes=settings.max_decoded_bytes,
            max_html_depth=settings.max_html_depth,
        )
        self.box = Box(settings.parse_cpu_s, settings.parse_memory_mb * 1024 * 1024)
        self._turns = asyncio.Semaphore(settings.concurrent)
        self.jobs = DocumentJobStore(pool)  # big posts queue here (services/document_jobs.py)

    # ---------- ingest ----------

    async def ingest(
        self,
        principal: Principal,
        doc: DocumentInput,
        *,
        charge: Charge | None = None,
        prefer_async: bool = False,
    ) -> DocumentOut | dict[str, Any]:
        """Store ``doc`` as the new version of its id (a new document without one);
        ``charge``: spends one rate unit per chunk before anything is embedded. Over
        ``sync_chunks`` chunks, or with ``prefer_async``, or behind an open job of the
        same id: queued as a job (services/document_jobs.py) and its view returned."""
        owner = self._owner(principal, doc)
        async with self._turns:
            head, chunks = await self._parsed(owner, doc, charge)
            if (
                prefer_async
                or len(chunks) > self.settings.sync_chunks
                or await self.jobs.has_open(principal.tenant_id, head["document_id"])
            ):
                return await self._accept(principal, owner, head, chunks, charge)
            if charge is not None:
                charge(float(len(chunks)))
            vectors = await self._embed([c.text for c in chunks])
        with write_errors():
            return DocumentOut.model_validate(
                await self._swap(principal, owner, head, chunks, vectors)
            )

    def authorize(self, principal: Principal, docs: list[DocumentInput]) -> list[Owner]:
        """Whose each document would be, or the 403 a write would get: for callers that
        must refuse before they read the documents (mem0's URL parts)."""
        return [self._owner(principal, d) for d in docs]

    async def ingest_many(
        self, principal: Principal, docs: list[DocumentInput], *, charge: Charge | None = None
    ) -> list[DocumentOut]:
        """Several documents all or nothing (mem0's add with document messages): each
        parsed and embedded first, then every swap in one transaction."""
        owners = self.authorize(principal, docs)
        async with self._turns:
            parsed = [await self._parsed(o, d, charge) for o, d in zip(owners, docs, strict=True)]
            if charge is not None:
                charge(float(sum(len(c) for _, c in parsed)))
            vectors = [await self._embed([c.text for c in chunks]) for _, chunks in parsed]
        # Document locks in one order (two adds naming the same documents never deadlock).
        order = sorted(range(len(docs)), key=lambda i: parsed[i][0]["document_id"])
        saved: dict[int, dict[str, Any]] = {}
        with write_errors():
            async with self.pool.connection() as conn, conn.transaction():
                for i in order:
                    head, chunks = parsed[i]
                    saved[i] = await self._swap_in(
                        conn, principal, owners[i], head, chunks, vectors[i], principal.actor
                    )
        return [DocumentOut.model_validate(saved[i]) for i in range(len(docs))]

    async def _parsed(
        self, owner: Owner, doc: DocumentInput, charge: Charge | None = None
    ) -> tuple[dict[str, Any], list[Chunk]]:
        """The head fields and chunks of ``doc`` (parsed and chunked in a worker thread);
        ``charge``: spends the parse's rate units (its CPU time, a refused parse's too)."""
        try:
            text, chunks, title, cost = await asyncio.to_thread(self._prepare, doc)
        except Refused as exc:
            if charge is not None and exc.cpu_s > 0:
                charge(units(exc.cpu_s, self.settings.parse_unit_cpu_s))
            code = "payload_too_large" if exc.status == 413 else "invalid_document"
            raise ApiError(exc.status, code, str(exc)) from None
        if charge is not None and cost > 0:
            charge(units(cost, self.settings.parse_unit_cpu_s))
        head = {
            "document_id": doc.document_id or uuid.uuid4().hex,
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
        return head, chunks

    async def _accept(
        self,
        caller: Principal,
        owner: Owner,
        head: dict[str, Any],
        chunks: list[Chunk],
        charge: Charge | None,
    ) -> dict[str, Any]:
        """Queue the document as a job once the write would be allowed now: the id's
        owner (403/409), rate units (429), the chunks the version adds against the
        quota (403) and a running forget (409), the tenant's open jobs (429)."""
        old = await self.store.head(caller.tenant_id, head["document_id"])
        self._check_replace(caller, old, head)
        if charge is not None:
            charge(float(len(chunks)))
        added = len(chunks) - (old["chunk_count"] if old is not None else 0)
        rows = [self._chunk_row(head, 0, c) for c in chunks[: max(added, 0)]]
        with write_errors():
            refused = await self.writer.refusal(owner, rows) if rows else None
            if refused is not None:
                raise refused
        payload = await asyncio.to_thread(stored_chunks, chunks)
        job = await self.jobs.enqueue(
            caller.tenant_id,
            head["document_id"],
            head["owner"],
            (caller.key_id, caller.role, caller.user_id),
            head,
            payload,
            len(chunks),
            cap=self.settings.jobs_per_tenant,
        )
        if job is None:
            raise ApiError(
                429,
                "too_many_jobs",
                f"the tenant has {self.settings.jobs_per_tenant} document jobs open;"
                " retry when one has finished",
                headers={"Retry-After": "10"},
            )
        return job_view(job)

    def _prepare(self, doc: DocumentInput) -> tuple[str, list[Chunk], str | None, float]:
        """Parse and chunk (CPU work: runs in a worker thread; PDF and HTML in a limited
        child process). The last item: the CPU seconds of a parse in the child, to be
        charged (0.0 for text and Markdown, linear scans paid for by their chunks)."""
        parsed, cpu_s = parse_bounded(
            doc.content_type, text=doc.text, data=doc.data, limits=self.limits, box=self.box
        )
        try:
            sizes = self.sizes if isinstance(self.sizes, ChunkSizes) else self.sizes()
            chunks = chunk(parsed, self.tokenizer(), sizes, self.settings.max_chunks)
        except DocumentRefused as exc:
            raise Refused(exc.status, str(exc), cpu_s) from None
        return parsed.text, chunks, parsed.title, cpu_s

    async def _embed(
        self, texts: list[str], after_call: Callable[[int], Awaitable[None]] | None = None
    ) -> np.ndarray:
        """The chunks' vectors, in bulk-lane calls of ``embed_batch`` texts;
        ``after_call(texts done)`` after each (the job worker renews its lease there)."""
        step, parts = self.settings.embed_batch, []
        for i in range(0, len(texts), step):
            batch = texts[i : i + step]
            vectors = await self.embed(batch, is_query=False, bulk=True)
            parts.append(np.asarray(vectors, dtype=np.float32))
            if after_call is not None:
                await after_call(i + len(batch))
        return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    async def restore(self, owner: Owner, doc: ExportedDocument, actor: str) -> DocumentOut:
        """An imported user document (an export's record): its chunks as they were cut,
        re-embedded, as a new version of its id (one transaction, as a post)."""
        caller = Principal(actor, owner.tenant_id, "user", user_id=owner.user_id)
        chunks = [
            Chunk(c.chunk_index, c.content, c.char_start, c.char_end, tuple(c.heading_path), 0)
            for c in sorted(doc.chunks, key=lambda c: c.chunk_index)
        ]
        head = {
            "document_id": doc.document_id,
            "owner": owner.user_id,
            "scope": "user",
            "agent_id": None,
            "user_id": owner.user_id,
            "title": doc.title,
            "source_url": doc.source_url,
            "content_type": doc.content_type,
            "metadata": doc.metadata,
            "tags": doc.tags,
            "content_sha256": doc.content_sha256
            or hashlib.sha256("".join(c.text for c in chunks).encode()).hexdigest(),
            "chars": doc.chars or sum(len(c.text) for c in chunks),
            "chunk_count": len(chunks),
        }
        async with self._turns:
            vectors = await self._embed([c.text for c in chunks])
        with write_errors():
            saved = await self._swap(caller, owner, head, chunks, vectors, actor=actor)
        return DocumentOut.model_validate(saved)

    async def check_restorable(self, owner: Owner, docs: list[ExportedDocument]) -> None:
        """409 unless every id is free or already ``owner``'s (ids are per tenant): an
        import checks this before it writes anything."""
        for doc in docs:
            head = await self.store.head(owner.tenant_id, doc.document_id)
            if head is not None and head["owner"] != owner.user_id:
                raise ApiError(
                    409, "conflict", f"document_id {doc.document_id!r} is taken in this tenant"
                )

    async def _swap(
        self,
        caller: Principal,
        owner: Owner,
        head: dict[str, Any],
        chunks: list[Chunk],
        vectors: np.ndarray,
        *,
        actor: str | None = None,
        job: tuple[uuid.UUID, uuid.UUID] | None = None,
    ) -> dict[str, Any]:
        """Replace the document's chunks and head in one transaction; ``job``: the
        (id, token) of the job this writes, held first and marked done in it."""
        async with self.pool.connection() as conn, conn.transaction():
            if job is not None and not await self.jobs.hold(conn, *job):
                raise JobLost(job[0])
            saved = await self._swap_in(
                conn, caller, owner, head, chunks, vectors, actor or caller.actor
            )
            if job is not None:
                await self.jobs.done(conn, job[0], saved["version"])
        return saved

    async def _swap_in(
        self,
        conn: AsyncConnection,
        caller: Principal,
        owner: Owner,
        head: dict[str, Any],
        chunks: list[Chunk],
        vectors: np.ndarray,
        actor: str,
    ) -> dict[str, Any]:
        """The swap's statements in ``conn``'s transaction (the caller commits)."""
        tenant, document_id = caller.tenant_id, head["document_id"]
        old = await self.store.lock(conn, tenant, document_id)
        self._check_replace(caller, old, head)
        version = 1 if old is None else old["version"] + 1
        await conn.execute(events.QUIET)  # one document event, not one per chunk
        await self.store.remove_chunks(conn, tenant, document_id, actor)
        items = [self._chunk_row(head, version, c) for c in chunks]
        rows = await self.writer.add(owner, items, vectors, actor=actor, conn=conn)
        if len(rows) != len(items):
            raise ForgetInProgress(owner)
        saved = await self.store.save_head(conn, tenant, head, actor)
        await conn.execute(events.LOUD)
        await events.emit(
            conn,
            tenant,
            "document.ingested",
            user_id=owner.user_id,
            agent_id=head["agent_id"],
            data={
                "document_id": document_id,
                "version": saved["version"],
                "chunk_count": len(items),
                "scope": head["scope"],
            },
        )
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
