"""Memory use cases (create, read, list, update, delete, search), independent of HTTP and Ray.

Embedding and search arrive as callables (``Embed``/``Search``): in the Ingress
they are Ray handle calls, in unit tests in-process objects. A search goes by its text:
the ``Search`` backend embeds it (in the Retriever or the Embedder: ``MEMSERVE_QUERY_EMBED``,
serve_app/retrieval/query_embed.py), so this layer never holds a query vector.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from serve_app.auth import Principal, resolve_owner
from serve_app.context import knowledge as kb
from serve_app.context.evidence import Evidence, stems
from serve_app.errors import ApiError
from serve_app.retrieval.query import SearchQuery
from serve_app.schemas import MemoryFields
from serve_app.services.backends import Embed, Rerank, Search
from serve_app.services.ingest_pipeline import IngestPipeline
from serve_app.services.validity import touches_validity, validity_patch
from serve_app.services.write_errors import write_errors
from serve_app.store import NewMemory, Owner
from serve_app.store.citations import CHUNK_TYPE, CitationStore
from serve_app.store.guarded import GuardedWriter
from serve_app.store.memories import InvalidCursor, VersionConflict

if TYPE_CHECKING:
    from serve_app.services.access import AccessTracker

SHARED_SCOPES = ("agent", "org")
SHARED_WRITERS = ("service", "admin")


def knowledge_query(q: SearchQuery, owners: tuple[str, ...]) -> SearchQuery:
    """The shared owners' part of a user's search: their knowledge-base chunks only.

    A user's search has returned that user's memories; the org's and agents' shared
    *memories* stay out of it (they reach the context block through its own searches),
    so adding a knowledge base to a tenant changes no one's memory results but for the
    cited chunks next to them."""
    return replace(q, owners=owners, agent_id=None, types=(CHUNK_TYPE,))


def write_owner(caller: Principal, user_id: str | None, items: Sequence[NewMemory]) -> Owner:
    """Only shared items: the tenant (no user needed); otherwise the named/bound user."""
    if all(i.scope in SHARED_SCOPES for i in items):
        return Owner(caller.tenant_id, None)
    return resolve_owner(caller, user_id)


def read_owner(caller: Principal, user_id: str | None) -> Owner:
    """By-id routes: a service key naming no user acts on the tenant's shared memories."""
    if user_id is None and caller.role in SHARED_WRITERS:
        return Owner(caller.tenant_id, None)
    return resolve_owner(caller, user_id)


def expiry(ttl_s: float | None, expires_at: datetime | None) -> datetime | None:
    """When a memory expires: ``ttl_s`` from now or ``expires_at`` (not both)."""
    if ttl_s is not None and expires_at is not None:
        raise ApiError(422, "invalid_request", "send ttl_s or expires_at, not both")
    if ttl_s is not None:
        return datetime.now(UTC) + timedelta(seconds=ttl_s)
    if expires_at is not None and expires_at.tzinfo is None:
        raise ApiError(422, "invalid_request", "expires_at needs a time zone")
    return expires_at


class MemoryService:
    def __init__(
        self,
        writer: GuardedWriter,
        embed: Embed,
        search: Search,
        *,
        session_ttl_s: float,
        access: AccessTracker | None = None,
        pipeline: IngestPipeline | None = None,
    ) -> None:
        """``pipeline``: how a long batch add embeds and inserts in overlapped chunks
        (:mod:`serve_app.services.ingest_pipeline`); None: never."""
        self.writer = writer  # every write (guards, quotas, validation, history)
        self.store = writer.memories  # reads
        self.embed = embed
        self._search = search
        self.session_ttl_s = session_ttl_s
        self.access = access  # counts what search/context return (None: not tracked)
        self.pipeline = pipeline or IngestPipeline(writer, embed, 0)
        self.citations = CitationStore(writer.memories.pool)  # chunks' provenance

    def new_memory(self, f: MemoryFields, caller: Principal | None = None) -> NewMemory:
        """Validate the scope: agent/org memories are shared knowledge, written by service keys."""
        scope = f.scope or ("session" if f.session_id else "user")
        if scope in SHARED_SCOPES and (caller is None or caller.role not in SHARED_WRITERS):
            raise ApiError(
                403, "forbidden", "agent and org memories are written by service keys only"
            )
        if scope == "agent" and not f.agent_id:
            raise ApiError(422, "invalid_request", "an agent memory needs agent_id")
        if scope == "session" and not f.session_id:
            raise ApiError(422, "invalid_request", "a session memory needs session_id")
        expires_at = expiry(f.ttl_s, f.expires_at)
        if expires_at is None and scope == "session" and self.session_ttl_s > 0:
            expires_at = datetime.now(UTC) + timedelta(seconds=self.session_ttl_s)
        return NewMemory(
            content=f.content,
            type=f.type.value,
            scope=scope,
            agent_id=f.agent_id,
            session_id=f.session_id,
            tags=f.tags or [],
            metadata=f.metadata or {},
            importance=0.5 if f.importance is None else f.importance,
            expires_at=expires_at,
            valid_from=f.valid_from,
            supersedes=list(dict.fromkeys(f.supersedes or [])),
            pinned=f.pinned,
        )

    async def add(
        self, owner: Owner, items: Sequence[NewMemory], actor: str
    ) -> list[dict[str, Any]]:
        if not items:
            return []
        if self.pipeline.applies(len(items)):
            with write_errors():
                return await self.pipeline.add(owner, items, actor=actor)
        vectors = await self.embed([i.content for i in items], is_query=False)
        with write_errors():
            return await self.writer.add(owner, items, vectors, actor=actor)

    async def get(self, owner: Owner, item_id: uuid.UUID) -> dict[str, Any]:
        row = await self.store.get(owner, item_id)
        if row is None:
            raise ApiError(404, "not_found", "memory not found")
        return row

    async def list(
        self,
        owner: Owner,
        *,
        limit: int,
        cursor: str | None,
        type: str | None,
        agent_id: str | None,
        session_id: str | None,
        status: str | None = None,
        as_of: datetime | None = None,
        include_invalidated: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        try:
            return await self.store.list(
                owner,
                limit=limit,
                cursor=cursor,
                type=type,
                agent_id=agent_id,
                session_id=session_id,
                status=status,
                as_of=as_of,
                include_invalidated=include_invalidated,
            )
        except InvalidCursor as exc:
            raise ApiError(400, "invalid_request", "invalid cursor") from exc

    async def update(
        self,
        owner: Owner,
        item_id: uuid.UUID,
        changes: dict[str, Any],
        actor: str,
        *,
        expected_version: int | None = None,
    ) -> dict[str, Any]:
        """Partial update; with ``expected_version`` a concurrent change is a 409."""
        if "ttl_s" in changes or "expires_at" in changes:
            changes = dict(changes)
            changes["expires_at"] = expiry(changes.pop("ttl_s", None), changes.get("expires_at"))
        vector, event = None, "UPDATE"
        if "content" in changes or touches_validity(changes):
            current = await self.get(owner, item_id)
            if touches_validity(changes):
                changes, event = validity_patch(changes, current)
            if current["content"] != changes.get("content", current["content"]):
                vector = (await self.embed([changes["content"]], is_query=False))[0]
        try:
            with write_errors():
                row = await self.writer.update(
                    owner,
                    item_id,
                    changes,
                    vector,
                    actor=actor,
                    event=event,
                    expected_version=expected_version,
                )
        except VersionConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        if row is None:
            raise ApiError(404, "not_found", "memory not found")
        return row

    async def delete(self, owner: Owner, item_id: uuid.UUID, actor: str) -> None:
        if not await self.writer.delete(owner, item_id, actor=actor):
            raise ApiError(404, "not_found", "memory not found")

    async def delete_scope(
        self, owner: Owner, *, agent_id: str | None, session_id: str | None, actor: str
    ) -> int:
        return await self.writer.delete_scope(
            owner, agent_id=agent_id, session_id=session_id, actor=actor
        )

    async def history(self, owner: Owner, item_id: uuid.UUID, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` events (``limits.history_events``), oldest first."""
        events = await self.store.history(owner, item_id, limit)
        if events is None:
            raise ApiError(404, "not_found", "memory not found")
        return events

    async def search(self, q: SearchQuery) -> list[dict[str, Any]]:
        return (await self.search_many([q]))[0]

    async def search_many(self, queries: Sequence[SearchQuery]) -> list[list[dict[str, Any]]]:
        """Several searches in one backend call (context: one text, broad and session)."""
        found = await self._search(queries)
        return [self._accessed(q, rows) for q, rows in zip(queries, found, strict=True)]

    async def cite(self, tenant_id: str, ids: Sequence[Any]) -> dict[Any, dict[str, Any]]:
        """id -> ``data`` of those ``ids`` that are the tenant's document chunks."""
        return await self.citations.lookup(tenant_id, ids)

    async def search_knowledge(
        self,
        queries: Sequence[SearchQuery],
        top_k: int,
        evidence: Evidence | None = None,
        rerank: Rerank | None = None,
    ) -> list[dict[str, Any]]:
        """The user's own search and the shared knowledge's in one backend call
        (one embedding), merged by score (a row found twice keeps its best), cut to
        ``top_k``; chunks get their ``citation``, and with ``explain`` a ``source`` and
        ``why`` (``evidence``: the context block's gate, said for each chunk).
        ``rerank``: re-orders the merged candidates before the cut (the queries fetch
        more than ``top_k`` for it)."""
        if not queries:
            return []
        found = await self._search(queries)
        best: dict[Any, dict[str, Any]] = {}
        for row in (r for rows in found for r in rows):
            if row["id"] not in best or row["score"] > best[row["id"]]["score"]:
                best[row["id"]] = row
        if sum(1 for rows in found if rows) > 1:
            # Each search scales its scores to its own candidates (its best is near 1
            # whatever its cosine), so an org chunk at 0.1 could outrank the user's own at
            # 0.6. Across sources the one measure they share ranks: the cosine.
            for row in best.values():
                row["score"] = float(row.get("similarity") or 0.0)
        out = sorted(best.values(), key=lambda r: (-r["score"], str(r["id"])))
        if rerank is not None:
            out = await rerank(out)
        out = out[:top_k]
        chunks = [r for r in out if kb.is_chunk(r)]
        if chunks:
            kb.attach(chunks, await self.cite(queries[0].tenant_id, [r["id"] for r in chunks]))
        if queries[0].explain:
            explain_sources(out, queries[0].text, evidence)
        return self._accessed(queries[0], out)

    def _accessed(self, q: SearchQuery, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.access is not None and rows:
            self.access.note(q.tenant_id, (r["id"] for r in rows))
        return rows


def explain_sources(rows: Sequence[dict[str, Any]], text: str, evidence: Evidence | None) -> None:
    """Say in each result's ``explain`` whether it is a memory or a knowledge chunk, and
    why a chunk was chosen: its document, and the context gate's verdict on it."""
    message = stems(text)
    for r in rows:
        ex = r.get("explain")
        if ex is None:
            continue
        if not kb.is_chunk(r):
            ex["source"] = "memory"
            continue
        c = r.get("citation") or {}
        verdict = (
            evidence.why(r.get("similarity"), stems(r["content"]), message)
            if evidence is not None
            else None
        )
        gate = verdict or "below the context evidence gate (left out of context blocks)"
        ex["source"] = "knowledge"
        ex["why"] = (
            f"{r['scope']} knowledge base {kb.label(c)}, chunk {c.get('chunk_index')} of"
            f" document {c.get('document_id')}: {gate}"
        )
