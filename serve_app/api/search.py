"""/v1/search: semantic search over the caller's memories and readable knowledge base."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fastapi import APIRouter

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.context.evidence import Evidence
from serve_app.errors import ApiError
from serve_app.retrieval.query import SearchQuery
from serve_app.schemas import SearchRequest, SearchResponse
from serve_app.services.memories import knowledge_query
from serve_app.services.rerank import report
from serve_app.store import Owner

if TYPE_CHECKING:
    from serve_app.retrieval.rerank import RerankOutcome
    from serve_app.services.registry import Services
    from serve_app.services.rerank import RerankStep

router = APIRouter(prefix="/v1", tags=["search"])


def to_query(body: SearchRequest, tenant_id: str, user_id: str, default_top_k: int) -> SearchQuery:
    f = body.filters
    return SearchQuery(
        tenant_id=tenant_id,
        user_id=user_id,
        top_k=body.top_k or default_top_k,
        threshold=body.threshold,
        types=tuple(t.value for t in body.types or ()),
        tags=tuple(body.tags or ()),
        agent_id=body.agent_id,
        session_id=body.session_id,
        metadata=dict(f.metadata) if f and f.metadata else {},
        created_after=f.created_after if f else None,
        created_before=f.created_before if f else None,
        text=body.query,
        mode=body.mode,
        include_archived=body.include_archived,
        as_of=body.as_of,
        reference_date=body.reference_date,
        include_invalidated=body.include_invalidated,
        explain=body.explain,
        document_ids=tuple(dict.fromkeys(body.document_ids or ())),
    )


def searches(body: SearchRequest, q: SearchQuery) -> list[SearchQuery]:
    """The user's own search (scope ``user``) and the shared knowledge's: the
    agent's document chunks with ``agent_id`` (scope ``agent``), the org's (scope
    ``org``); shared memories that are not chunks stay out (``knowledge_query``). The
    owners are fixed here from the key's tenant, never from the body. A session search
    stays the user's; ``agent_id`` filters the user's own memories and selects the
    agent's knowledge."""
    scopes = set(body.scopes or ("user", "agent", "org"))
    if body.scopes and "agent" in scopes and not body.agent_id:
        raise ApiError(422, "invalid_request", "scope 'agent' needs agent_id")
    out = [q] if "user" in scopes else []
    if not body.knowledge or body.session_id is not None or q.types:
        return out  # a type filter names memory types: no chunk is one
    shared = [f"@agent:{body.agent_id}"] if body.agent_id and "agent" in scopes else []
    shared += ["@org"] if "org" in scopes else []
    if shared:
        out.append(knowledge_query(q, tuple(shared)))
    return out


async def rerank_step(
    services: Services,
    requested: bool | str,
    owner: Owner,
    query: str,
    *,
    lenient: bool = False,
    context: bool = False,
) -> tuple[RerankStep | None, RerankOutcome | None]:
    """A request's ``rerank`` step (serve_app/services/rerank.py); 422 when it asks for a
    back-end nobody offers (``lenient``: mem0's no-op instead; ``context``: a block's)."""
    if requested is False:
        return None, None
    return await services.rerank.step(
        requested, owner.tenant_id, owner.user_id, query, lenient=lenient, context=context
    )


@router.post("/search", response_model=SearchResponse)
async def search(body: SearchRequest, caller: Caller, services: Svc):
    owner = resolve_owner(caller, body.user_id)
    q = to_query(body, owner.tenant_id, owner.user_id, services.settings.limits.default_top_k)
    c = services.settings.context
    gate = Evidence(c.evidence_similarity, c.evidence_similarity_lexical)
    step, outcome = await rerank_step(services, body.rerank, owner, body.query)
    # a reranked search fetches a pool of candidates for the back-end, then cuts to top_k
    wide = replace(q, top_k=max(q.top_k, step.pool)) if step is not None else q
    results = await services.memories.search_knowledge(searches(body, wide), q.top_k, gate, step)
    return {"results": results, "rerank": report(step, outcome)}
