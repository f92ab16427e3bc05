"""LLM spend: metering, its storage and the default token budgets."""

from __future__ import annotations

from pydantic_settings import BaseSettings

from serve_app.settings.base import group


class SpendSettings(BaseSettings):
    """Every LLM call is metered (serve_app/services/spend.py); budgets of 0 are off.

    The budget defaults apply to every tenant that does not set its own
    (``budgets`` in the tenant settings). ``background``: extraction, summaries,
    consolidation and ``infer`` adds (deferred when over); ``chat``: the chat proxy
    (429 when over) and the ``llm`` re-scoring of ``rerank`` (the search order when
    over). Tokens are prompt + completion.
    """

    model_config = group("MEMSERVE_SPEND_")

    background_tenant_daily: int = 0
    background_tenant_monthly: int = 0
    background_user_daily: int = 0
    chat_tenant_daily: int = 0
    chat_tenant_monthly: int = 0
    chat_user_daily: int = 0
    soft_threshold: float = 0.8  # share of a budget that raises the once-per-window alert
    # An intent (a call started, not finished) older than this is closed as 'lost' at its
    # reservation; it must exceed the longest LLM call: llm.timeout_s for the extractor's
    # (each retry attempt has its own intent).
    intent_stale_s: float = 600.0
    reconcile_interval_s: float = 30.0  # how often an extractor closes stale intents/prunes
    raw_retention_days: float = 7.0  # finished per-call rows kept (the daily roll-up stays)
    daily_retention_days: int = 400  # daily roll-up rows kept
    metric_tenants: int = 50  # tenants with their own metric label; the rest are "other"
    report_max_rows: int = 1000  # rows per page of GET /v1/admin/usage (and its cap)
