"""/v1/search: semantic search over the caller's memories."""

from __future__ import annotations

from fastapi import APIRouter

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.retrieval.query import SearchQuery
from serve_app.schemas import SearchRequest, SearchResponse

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
        include_invalidated=body.include_invalidated,
        explain=body.explain,
    )


@router.post("/search", response_model=SearchResponse)
async def search(body: SearchRequest, caller: Caller, services: Svc):
    owner = resolve_owner(caller, body.user_id)
    q = to_query(body, owner.tenant_id, owner.user_id, services.settings.limits.default_top_k)
    return {"results": await services.memories.search(q)}
