"""POST /v1/context without HTTP: facts + memories across scopes -> a prompt block.

Flow: facts (deterministic lookup) and, unless the message is a greeting, the
(expanded) query searched over the union of the user's, the agent's and the
organisation's memories, plus the current session's memories, in one backend call
that embeds the text once; results are merged, de-duplicated, and cut to the token budget.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from serve_app.context.expand import expand_query
from serve_app.context.format import format_context
from serve_app.context.prefilter import is_greeting
from serve_app.retrieval.query import SearchQuery
from serve_app.text import normalize

# Queries searched by their text (the backend embeds it once): MemoryService.search_many.
SearchFn = Callable[[Sequence[SearchQuery]], Awaitable[list[list[dict[str, Any]]]]]
FactsFn = Callable[[str, str, int], Awaitable[list[dict[str, Any]]]]
_WORDS = re.compile(r"\w+")
NEAR_DUPLICATE_JACCARD = 0.9


@dataclass(frozen=True)
class ContextRequest:
    tenant_id: str
    user_id: str
    query: str
    session_id: str | None = None
    agent_id: str | None = None
    history: Sequence[tuple[str, str]] = ()
    token_budget: int = 1000
    top_k: int = 10
    threshold: float | None = None
    max_facts: int = 50


@dataclass
class ContextResult:
    context: str
    memories: list[dict[str, Any]] = field(default_factory=list)
    facts: list[dict[str, Any]] = field(default_factory=list)
    search_query: str | None = None  # None: the pre-filter skipped the search
    tokens: int = 0


def owners_for(user_id: str, agent_id: str | None) -> tuple[str, ...]:
    """Owner keys a user may read (same rule as serve_app.store.records.owner_key)."""
    owners = [user_id]
    if agent_id:
        owners.append(f"@agent:{agent_id}")
    owners.append("@org")
    return tuple(owners)


def _word_set(normal: str) -> frozenset[str]:
    """The words of an already normalised text (normalised once per memory)."""
    return frozenset(_WORDS.findall(normal))


def dedupe(memories: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the first (best) of memories with the same id, text, or nearly the same words."""
    kept: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    word_sets: list[frozenset[str]] = []
    for m in memories:
        mid, text = str(m["id"]), normalize(m["content"])
        if mid in seen_ids or text in seen_text:
            continue
        words = _word_set(text)
        if words and any(
            len(words & w) / len(words | w) >= NEAR_DUPLICATE_JACCARD for w in word_sets
        ):
            continue
        seen_ids.add(mid)
        seen_text.add(text)
        word_sets.append(words)
        kept.append(m)
    return kept


def visible_in_session(m: dict[str, Any], session_id: str | None) -> bool:
    """Session memories belong to their session: other sessions' ones stay out."""
    return m.get("scope") != "session" or (session_id is not None and m["session_id"] == session_id)


class ContextBuilder:
    def __init__(self, search: SearchFn, facts: FactsFn) -> None:
        self.search = search
        self.facts = facts

    async def build(self, req: ContextRequest) -> ContextResult:
        facts_task = asyncio.ensure_future(self.facts(req.tenant_id, req.user_id, req.max_facts))
        memories: list[dict[str, Any]] = []
        text: str | None = None
        try:
            if not is_greeting(req.query):
                text = expand_query(req.query, req.history)
                memories = await self._memories(req, text)
            facts = await facts_task
        finally:
            facts_task.cancel()
        block = format_context(facts, memories, req.token_budget)
        return ContextResult(block.text, block.memories, block.facts, text, block.tokens)

    async def _memories(self, req: ContextRequest, text: str) -> list[dict[str, Any]]:
        broad = SearchQuery(
            tenant_id=req.tenant_id,
            user_id=req.user_id,
            top_k=req.top_k * 2,
            threshold=req.threshold,
            text=text,
            owners=owners_for(req.user_id, req.agent_id),
        )
        searches = [broad]
        if req.session_id:
            session = SearchQuery(
                tenant_id=req.tenant_id,
                user_id=req.user_id,
                top_k=req.top_k,
                threshold=req.threshold,
                session_id=req.session_id,
                text=text,
            )
            searches.append(session)
        found = [m for batch in await self.search(searches) for m in batch]
        found = [m for m in found if visible_in_session(m, req.session_id)]
        found.sort(key=lambda m: (-float(m.get("score") or 0.0), str(m["id"])))
        return dedupe(found)[: req.top_k]
