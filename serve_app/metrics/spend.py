"""LLM spend: tokens, calls and budget events per tenant (label count bounded)."""

from __future__ import annotations

from collections import Counter as Tally

from serve_app.metrics.specs import LLM_BUDGET_EVENTS, LLM_CALLS, LLM_TOKENS
from serve_app.telemetry import LocalCounter, MetricSet

__all__ = ["SpendMetrics"]


class SpendMetrics(MetricSet):
    """LLM tokens, calls and budget events per tenant; at most ``max_tenants`` tenants get
    their own label (first seen by this replica), the rest share ``other``."""

    OTHER = "other"

    def __init__(self, max_tenants: int = 50) -> None:
        super().__init__()
        self.max_tenants = max(0, max_tenants)
        self._labelled: set[str] = set()
        self.counts: Tally[str] = Tally()
        self.tokens = self.add(LocalCounter(LLM_TOKENS))
        self.calls = self.add(LocalCounter(LLM_CALLS))
        self.budget = self.add(LocalCounter(LLM_BUDGET_EVENTS))

    def tenant(self, tenant_id: str) -> str:
        if tenant_id in self._labelled:
            return tenant_id
        if len(self._labelled) < self.max_tenants:
            self._labelled.add(tenant_id)
            return tenant_id
        return self.OTHER

    def call(self, tenant_id: str, purpose: str, outcome: str, tokens: dict[str, int]) -> None:
        t = self.tenant(tenant_id)
        self.calls.inc((t, purpose, outcome))
        self.counts[f"calls_{purpose}"] += 1
        for kind, n in tokens.items():
            if n > 0:
                self.tokens.inc((t, purpose, kind), n)
                self.counts[f"{kind}_{purpose}"] += n

    def budget_event(self, tenant_id: str, group: str, event: str) -> None:
        self.counts[f"budget_{event}_{group}"] += 1
        self.budget.inc((self.tenant(tenant_id), group, event))
