"""Context blocks: what matters about a user for one message (used by /v1/context and chat)."""

from __future__ import annotations

from collections.abc import Sequence

from serve_app.context import ContextBuilder, ContextRequest, ContextResult
from serve_app.settings import ContextSettings
from serve_app.store import Owner


class ContextService:
    def __init__(self, builder: ContextBuilder, defaults: ContextSettings) -> None:
        self.builder = builder
        self.defaults = defaults

    async def build(
        self,
        owner: Owner,
        query: str,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        history: Sequence[tuple[str, str]] = (),
        token_budget: int | None = None,
        top_k: int | None = None,
    ) -> ContextResult:
        assert owner.user_id is not None
        d = self.defaults
        return await self.builder.build(
            ContextRequest(
                tenant_id=owner.tenant_id,
                user_id=owner.user_id,
                query=query,
                session_id=session_id,
                agent_id=agent_id,
                history=tuple(history),
                token_budget=token_budget or d.token_budget,
                top_k=top_k or d.top_k,
                threshold=d.threshold,
                max_facts=d.max_facts,
            )
        )
