"""A request's ``rerank`` option: which back-end it gets, and the step that applies it.

Used by ``/v1/search``, ``/v1/context`` (through the context builder's candidate list)
and mem0's search. A ``/v1`` request asking for a back-end its tenant is not offered
gets 422 (it asked for something explicit); mem0's search treats ``rerank`` as mem0
does without a configured reranker, a no-op, and says so in the response's ``rerank``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from serve_app.errors import ApiError
from serve_app.retrieval.rerank import Reranker, RerankOutcome, RerankUnavailable
from serve_app.store.llm_spend import CallTag
from serve_app.tenant_settings import Effective

Rows = list[dict[str, Any]]
EffectiveFn = Callable[[str], Awaitable[Effective]]


@dataclass
class RerankStep:
    """One request's re-scoring: applied to a candidate list by :meth:`__call__`, which
    records what happened in ``outcome`` (the response's ``rerank``)."""

    reranker: Reranker
    backend: str
    query: str
    tag: CallTag
    outcome: RerankOutcome | None = field(default=None)
    # after a call that applied: the score at which the back-end's judgement admits a
    # context candidate (the operator's ``MEMSERVE_RERANK_*_MIN_SCORE``); None: order only
    bar: float | None = field(default=None)
    context: bool = False  # a context block's step: the block's pool, not a search's

    @property
    def pool(self) -> int:
        """How many candidates the back-end re-scores (the searches fetch as many)."""
        return self.reranker.context_pool if self.context else self.reranker.pool

    async def __call__(self, rows: Rows) -> Rows:
        rows, self.outcome = await self.reranker.rerank(
            rows, self.query, self.backend, self.tag, self.pool
        )
        self.bar = self.reranker.min_score(self.backend) if self.outcome.applied else None
        return rows


def report(step: RerankStep | None, outcome: RerankOutcome | None) -> dict[str, Any] | None:
    """The response's ``rerank`` object (None: the request did not ask). A step that never
    ran (nothing was searched) reports ``no_candidates``."""
    if step is not None:
        outcome = step.outcome or RerankOutcome(step.backend, False, "no_candidates")
    return outcome.as_dict() if outcome is not None else None


class RerankService:
    def __init__(self, reranker: Reranker, effective: EffectiveFn | None = None) -> None:
        """``effective``: a tenant's settings (None: every tenant gets the operator's list)."""
        self.reranker = reranker
        self.effective = effective

    async def step(
        self,
        requested: bool | str,
        tenant_id: str,
        user_id: str | None,
        query: str,
        *,
        lenient: bool = False,
        context: bool = False,
    ) -> tuple[RerankStep | None, RerankOutcome | None]:
        """(the step to apply, None when ``rerank`` is off; the outcome when it is known
        already). Not offered: 422, or with ``lenient`` (mem0) no step and an outcome
        that says ``not_configured``. ``context``: a context block's step (its pool is
        ``MEMSERVE_RERANK_CONTEXT_CANDIDATES``)."""
        if requested is False:
            return None, None
        allowed = None
        if self.effective is not None:
            allowed = (await self.effective(tenant_id)).rerank_backends
        try:
            backend = self.reranker.choose(requested, allowed)
        except RerankUnavailable as exc:
            if lenient:
                return None, RerankOutcome(None, False, "not_configured")
            raise ApiError(422, "rerank_unavailable", str(exc)) from None
        assert backend is not None
        tag = CallTag(tenant_id, user_id, "rerank")
        return RerankStep(self.reranker, backend, query, tag, context=context), None

    async def close(self) -> None:
        await self.reranker.close()
