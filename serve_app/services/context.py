"""Context blocks: what matters about a user for one message (used by /v1/context and chat)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from serve_app.context import ContextBuilder, ContextRequest, ContextResult
from serve_app.context.builder import Levers, RerankFn, owners_for
from serve_app.context.evidence import FEATURES, Evidence
from serve_app.profile.classify import fact_class
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
        reference_date: date | None = None,
        explain: bool = False,
        rerank: RerankFn | None = None,
    ) -> ContextResult:
        """``explain``: the result says which candidates the block left out and why;
        ``rerank``: the request's re-scoring step, run on the memory candidates."""
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
                levers=levers(d),
                reference_date=reference_date,
                explain=explain,
                rerank=rerank,
            )
        )

    async def profile(
        self, owner: Owner, agent_id: str | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The user's profile memories and facts, most important first, each with ``why``
        (what every context block starts with, before the block's token cap)."""
        assert owner.user_id is not None
        d, b = self.defaults, self.builder
        owners = owners_for(owner.user_id, agent_id)
        memories = await b.profile(owner.tenant_id, owners, d.profile_max_items, None)
        facts = await b.facts(owner.tenant_id, owner.user_id, d.max_facts)
        facts = [f for f in facts if fact_class(f["category"], f["key"]) is not None]
        for m in memories:
            m["why"] = "profile: pinned" if m.get("pinned") else f"profile: {m['profile_class']}"
        for f in facts:
            f["why"] = f"profile: {fact_class(f['category'], f['key'])}"
        return memories, facts


def levers(d: ContextSettings) -> Levers:
    """The context levers as the settings have them (all off: the block as before)."""
    if d.evidence_learned and len(d.evidence_learned) != len(FEATURES) + 1:
        raise ValueError(
            f"MEMSERVE_CONTEXT_EVIDENCE_LEARNED: {len(FEATURES) + 1} numbers"
            f" (one per feature of {', '.join(FEATURES)}, then the bias)"
        )
    return Levers(
        profile=d.profile,
        profile_share=d.profile_share,
        profile_max_items=d.profile_max_items,
        split=d.split_parts,
        max_parts=d.max_parts,
        gate=d.relevance_gate,
        evidence=Evidence(
            d.evidence_similarity,
            d.evidence_similarity_lexical,
            d.evidence_margin,
            d.evidence_min_shared,
            d.evidence_ignore_time_words,
            d.evidence_time_free,
            fill=d.evidence_fill,
            floor=d.evidence_floor,
            learned=d.evidence_learned,
            learned_min=d.evidence_learned_min,
        ),
        foreign_guard=d.foreign_guard,
        foreign_similarity=d.foreign_similarity,
        topic_bridge=d.topic_bridge,
        topic_min_cosine=d.topic_min_cosine,
        topic_margin=d.topic_margin,
        topic_similarity=d.topic_similarity,
        topic_max_items=d.topic_max_items,
        small_talk=d.small_talk,
        knowledge=d.knowledge,
        knowledge_share=d.knowledge_share,
        knowledge_top_k=d.knowledge_top_k,
        knowledge_chunk_tokens=d.knowledge_chunk_tokens,
        pooled_parts=d.pooled_parts,
        pooled_time_free=d.pooled_time_free,
    )
