"""/v1/context: a prompt-ready block of what matters about the user for this message."""

from __future__ import annotations

from fastapi import APIRouter

from serve_app.api.deps import Caller, Svc
from serve_app.auth import resolve_owner
from serve_app.schemas import ContextRequest, ContextResponse

router = APIRouter(prefix="/v1", tags=["context"])


@router.post("/context", response_model=ContextResponse)
async def context(body: ContextRequest, caller: Caller, services: Svc):
    result = await services.context.build(
        resolve_owner(caller, body.user_id),
        body.query,
        session_id=body.session_id,
        agent_id=body.agent_id,
        history=[(m.role, m.content) for m in body.history or ()],
        token_budget=body.token_budget,
        top_k=body.top_k,
        reference_date=body.reference_date,
    )
    return {
        "context": result.context,
        "profile": result.profile,
        "memories": result.memories,
        "facts": result.facts,
        "search_query": result.search_query,
        "parts": result.parts,
        "tokens": result.tokens,
        "profile_tokens": result.profile_tokens,
        "knowledge": result.knowledge,
        "knowledge_tokens": result.knowledge_tokens,
    }
