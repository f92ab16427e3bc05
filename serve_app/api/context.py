"""/v1/context: a prompt-ready block of what matters about the user for this message."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from serve_app.api.deps import principal
from serve_app.api.state import AppState, current
from serve_app.auth import Principal, resolve_owner
from serve_app.context import ContextBuilder, ContextRequest, ContextResult
from serve_app.context.facts import FactsReader
from serve_app.schemas import ContextRequest as ContextBody
from serve_app.schemas import ContextResponse

router = APIRouter(prefix="/v1", tags=["context"])


def builder(state: AppState) -> ContextBuilder:
    """One builder per app state (cached in ``state.extras``)."""
    b = state.extras.get("context_builder")
    if b is None:
        b = ContextBuilder(
            state.service.embed,
            state.service.search_vector,
            FactsReader(state.pool).active,
        )
        state.extras["context_builder"] = b
    return b


async def build_context(
    caller: Principal,
    user_id: str | None,
    query: str,
    *,
    session_id: str | None = None,
    agent_id: str | None = None,
    history: list[tuple[str, str]] | None = None,
    token_budget: int | None = None,
    top_k: int | None = None,
) -> ContextResult:
    """Shared by /v1/context and the chat proxy: the caller's owner, then the builder."""
    state = current()
    s = state.settings
    owner = resolve_owner(caller, user_id)
    req = ContextRequest(
        tenant_id=owner.tenant_id,
        user_id=owner.user_id,
        query=query,
        session_id=session_id,
        agent_id=agent_id,
        history=tuple(history or ()),
        token_budget=token_budget or s.context_token_budget,
        top_k=top_k or s.context_top_k,
        threshold=s.context_threshold,
        max_facts=s.context_max_facts,
    )
    return await builder(state).build(req)


@router.post("/context", response_model=ContextResponse)
async def context(body: ContextBody, caller: Annotated[Principal, Depends(principal)]):
    result = await build_context(
        caller,
        body.user_id,
        body.query,
        session_id=body.session_id,
        agent_id=body.agent_id,
        history=[(m.role, m.content) for m in body.history or ()],
        token_budget=body.token_budget,
        top_k=body.top_k,
    )
    return {
        "context": result.context,
        "memories": result.memories,
        "facts": result.facts,
        "search_query": result.search_query,
        "tokens": result.tokens,
    }
