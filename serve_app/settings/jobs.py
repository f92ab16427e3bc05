"""Writes and background work: lifecycle, quotas, the LLM, extraction, consolidation, re-embed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import env, group


class LifecycleSettings(BaseSettings):
    """Forget, expiry purge and access tracking."""

    model_config = group("MEMSERVE_LIFECYCLE_")

    forget_batch: int = 2000  # rows per delete statement of a forget (each << statement timeout)
    # Forgets running at once per replica (each holds a pooled connection to its end; the
    # others wait without one), so concurrent large forgets leave the pool to other work.
    forget_concurrency: int = Field(2, ge=1)
    purge_interval_s: float = 60.0  # expired memories are purged this often; 0: never
    purge_batch: int = 1000  # rows per purge statement
    purge_max_batches: int = 50  # statements per purge round (the rest waits for the next)
    erasure_keep_s: float = 86400.0  # finished erasure records kept (extraction leases << this)
    # Events of the feed (GET /v1/events) are kept this long, then pruned by the purger
    # (purge_batch rows a statement, purge_max_batches statements a round); 0: kept.
    events_keep_s: float = Field(7 * 86400.0, ge=0)
    # A running forget renews its erasure's lease between chunks (each chunk << this); an
    # erasure left unfinished by a dead replica stops blocking new work after it.
    erasure_lease_s: float = 60.0
    access_tracking: bool = True  # count what search/context return (batched, off the path)
    access_flush_s: float = 2.0  # how often the batched access counts are written
    access_max_pending: int = 100_000  # memories counted between flushes (more: dropped)
    # Time to live (s) of a new memory per type when the write names none, JSON
    # {"episodic": 2592000}; absent or 0: kept until deleted. Tenants override it.
    retention_s: dict[str, float] = Field(default_factory=dict)


class QuotaSettings(BaseSettings):
    """Memory quotas (0: unlimited); over quota an add is a 403 and writes nothing."""

    model_config = group("MEMSERVE_QUOTA_")

    max_memories_per_user: int = 0
    max_memories_per_tenant: int = 0
    max_facts_per_user: int = 0  # active fact keys (a new value of a key is free)
    max_facts_per_tenant: int = 0


class LLMSettings(BaseSettings):
    """The OpenAI-compatible endpoint of extraction and the chat proxy (unset: off)."""

    model_config = group("MEMSERVE_LLM_")

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 2
    backoff_s: float = 0.5
    breaker_failures: int = 5  # consecutive failed calls that open the breaker
    breaker_reset_s: float = 30.0  # an open breaker lets one trial call through after this
    max_tokens: int = 1024
    # How extraction, summaries and consolidation ask for JSON: json_schema (strict, from
    # the answer models; an endpoint that refuses it is asked in json_object instead, once,
    # and remembered) or json_object (loose JSON, for endpoints that mishandle schemas).
    response_format: Literal["json_schema", "json_object"] = "json_schema"
    # The chat proxy's upstream call (answers can be long; extraction uses timeout_s).
    chat_timeout_s: float = Field(120.0, validation_alias=env("MEMSERVE_CHAT_TIMEOUT_S"))


class ExtractSettings(BaseSettings):
    model_config = group("MEMSERVE_EXTRACT_")

    every_n_turns: int = 4  # user turns per session between extractions
    min_confidence: float = 0.4
    min_importance: float = 0.2
    merge_similarity: float = 0.9  # >= this to an existing memory: merge, not add
    restatement_similarity: float = 0.75  # assistant sentence vs memory: junk
    max_turns: int = 40  # turns per LLM call
    max_attempts: int = 3  # failed attempts (4xx, timeout, bad JSON, DB) before dead-letter
    retry_backoff_s: float = 30.0  # a failed batch waits this (doubling per attempt)
    max_prompt_tokens: int = 6000  # a longer batch is split over several LLM calls
    max_turn_tokens: int = 1500  # a longer turn is truncated in the prompt
    concurrency: int = 8  # LLM calls in flight per extractor replica
    tenant_concurrency: int = 4  # of those, at most this many for one tenant
    max_queued: int = 10_000  # sessions queued in a replica (more: left to the durable scan)
    scan_per_user: int = 2  # sessions of one user per scan (fair share)
    scan_interval_s: float = 10.0  # re-scan of the durable queue (pending turns)
    idle_s: float = 300.0  # pending turns this old are extracted below N
    lease_s: float = 180.0  # claim on turns being extracted (crash recovery)
    # Reconcile on write (serve_app/extraction/reconcile.py): the extraction prompt shows
    # the owner's nearest live memories and facts under aliases; off: today's prompt.
    reconcile: bool = True
    reconcile_per_turn: int = 5  # nearest memories per user turn (dense, and lexical)
    reconcile_max_memories: int = 12  # shown in one prompt, deduplicated
    reconcile_max_facts: int = 8
    reconcile_max_tokens: int = 400  # the known block's budget in the prompt
    reconcile_min_similarity: float = 0.2  # weaker dense neighbours are not shown
    # Grounded extraction (serve_app/extraction/grounding.py): an extracted memory or fact
    # whose words come from the known block, not the new turns, is dropped and counted.
    ground: bool = True
    ground_copied_share: float = Field(0.5, ge=0.0, le=1.0)  # of its words: known-only
    ground_margin: float = 0.05  # cosine: closer to a known item than to the turns by this
    ground_max_sentences: int = Field(256, ge=1)  # turn sentences embedded for the check
    # An extraction call's max_tokens, sized from its batch (capped by llm.max_tokens):
    # base + per user turn + per memory/fact shown. An answer cut at that size is asked
    # again once at the cap. 0 per turn: always llm.max_tokens.
    answer_tokens_base: int = 256
    answer_tokens_per_turn: int = 160
    answer_tokens_per_known: int = 48
    # /mem0 add with infer waits this long for the extraction's event list (then: PENDING)
    sync_wait_s: float = 20.0
    # Uncompressed turns that trigger an episodic summary; newest turns left out of it.
    compress_every_m_turns: int = Field(20, validation_alias=env("MEMSERVE_COMPRESS_EVERY_M_TURNS"))
    compress_keep_window: int = Field(10, validation_alias=env("MEMSERVE_COMPRESS_KEEP_WINDOW"))
    # Turns older than this are dropped once extracted.
    turn_ttl_hours: float = Field(72.0, validation_alias=env("MEMSERVE_SESSION_TURN_TTL_HOURS"))
    # Prompt guidance (mem0's names; tenants override). Categories: JSON {"name": "what"}.
    custom_instructions: str = ""
    includes: str = ""
    excludes: str = ""
    custom_categories: dict[str, str] = Field(default_factory=dict)


class ConsolidateSettings(BaseSettings):
    """Periodic per-user consolidation: merge, insights, episode digests, decay."""

    model_config = group("MEMSERVE_CONSOLIDATE_")

    interval_s: float = 600.0  # how often an extractor replica looks for users; 0: off
    min_interval_s: float = 3600.0  # a user is consolidated at most this often
    users_per_tick: int = 20
    max_memories: int = 20_000  # memories of a user looked at per run
    merge_similarity: float = 0.9  # near-duplicates at or above this merge
    # Nearest memories each memory is paired with (merge and insight steps): bounds the
    # pairs of a run at max_memories * max_neighbours however alike the memories are.
    max_neighbours: int = Field(default=16, ge=1)
    max_merge_group: int = Field(default=1000, ge=2)  # memories merged into one per run
    cluster_similarity: float = 0.75  # related memories an insight is drawn from
    min_cluster: int = 3
    max_cluster: int = 12
    max_insights: int = 3  # LLM insight calls per run
    episodic_age_days: float = 30.0  # older episodic memories are summarised
    max_digests: int = 2  # LLM digest calls per run
    digest_batch: int = 20  # episodic memories per digest
    decay_age_days: float = 30.0  # never retrieved and this old: importance decays
    decay_factor: float = 0.9
    decay_floor: float = 0.05
    max_decay: int = 5000  # memories decayed per run
    # A run's lease on its user, renewed by each write and before each LLM call: must
    # outlast one LLM call with its retries; a crashed replica's run is taken over after it.
    lease_s: float = 300.0


class ReembedSettings(BaseSettings):
    """A model change: the background re-embed into the new model's table (serve_app/reembed)."""

    model_config = group("MEMSERVE_REEMBED_")

    rate_per_s: float = 200.0  # texts per second re-embedded (0: as fast as it goes)
    batch: int = 64  # texts per embedder call and per write
    poll_s: float = 5.0  # replicas re-read the model registry this often (NOTIFY is at once)
    settle_s: float = 30.0  # after a switch: repair passes for replicas that had not switched
    margin_s: float = 30.0  # longest write transaction the repair watermark allows for


class WebhookSettings(BaseSettings):
    """Webhook delivery of the event outbox: the dispatcher in the Extractor tier."""

    model_config = group("MEMSERVE_WEBHOOKS_")

    interval_s: float = 1.0  # how often a dispatcher fans out and claims deliveries; 0: off
    max_subscriptions: int = Field(10, ge=1)  # per tenant
    subscriptions_per_round: int = Field(100, ge=1)  # subscriptions a round serves at most
    fanout_batch: int = Field(500, ge=1)  # events a subscription takes from the feed a round
    in_flight_per_subscription: int = Field(8, ge=1)  # concurrent deliveries (distinct owners)
    timeout_s: float = Field(10.0, gt=0)  # a whole request: connect, send, answer
    max_response_bytes: int = Field(65536, ge=0)  # read of an answer's body, at most
    max_attempts: int = Field(8, ge=1)  # then the delivery is dead (replay: admin API)
    backoff_s: float = Field(2.0, gt=0)  # first retry after ~this; doubles each attempt
    max_backoff_s: float = Field(3600.0, gt=0)
    # Delivery to private, loopback, link-local or reserved addresses is refused (SSRF)
    # unless the address is in one of these networks (CIDR), e.g. ["127.0.0.1/32"].
    allowed_networks: list[str] = Field(default_factory=list)
    # The dispatcher's thread runs at this nice value (Linux: per thread), so deliveries
    # yield the CPU to the request path under load (docs/events.md); 0: not lowered.
    nice: int = Field(10, ge=0, le=19)
