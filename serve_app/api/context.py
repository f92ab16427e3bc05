"""/v1/context: a prompt-ready block of what matters about the user for this message.

``POST`` takes the body (with the conversation's ``history``); ``GET`` the same options
as query parameters (no history), e.g. ``GET /v1/context?query=...&explain=true`` for an
operator who wants to see which candidates the block left out and by which rule.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from serve_app.api.deps import Caller, Svc
from serve_app.api.search import rerank_step
from serve_app.auth import resolve_owner
from serve_app.schemas import ContextQuery, ContextRequest, ContextResponse
from serve_app.services.rerank import report

router = APIRouter(prefix="/v1", tags=["context"])


@router.post("/context", response_model=ContextResponse)
async def context(body: ContextRequest, caller: Caller, services: Svc):
    return await _build(body, caller, services)


@router.get("/context", response_model=ContextResponse)
async def context_get(params: Annotated[ContextQuery, Query()], caller: Caller, services: Svc):
    return await _build(params, caller, services)


async def _build(body: ContextQuery, caller: Caller, services: Svc) -> dict[str, Any]:
    owner = resolve_owner(caller, body.user_id)
    step, outcome = await rerank_step(services, body.rerank, owner, body.query, context=True)
    history = body.history if isinstance(body, ContextRequest) else None
    result = await services.context.build(
        owner,
        body.query,
        session_id=body.session_id,
        agent_id=body.agent_id,
        history=[(m.role, m.content) for m in history or ()],
        token_budget=body.token_budget,
        top_k=body.top_k,
        reference_date=body.reference_date,
        explain=body.explain,
        rerank=step,
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
        "left_out": result.left_out,
        "rerank": report(step, outcome),
    }
