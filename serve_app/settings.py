"""All runtime settings, one group per component, each default stated once.

Values come from ``MEMSERVE_*`` environment variables (the names in DESIGN §8
are a contract, and every other name is kept stable: a group's prefix plus the
field name, or the field's alias where the historic name differs). Components
take their own group (``settings.embed``, ``settings.retrieval``, ...). Scaling
(replicas, CPUs, GPUs, autoscaling) lives in the Serve config, not here; the
embedder's batching may be hot-reloaded through its Serve ``user_config``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memserve"))


def _group(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=prefix, extra="ignore", populate_by_name=True)


def _env(name: str) -> str:
    """A field whose variable is not ``<group prefix><FIELD>`` (its historic name)."""
    return name


class ServingSettings(BaseSettings):
    """How `make run` starts Ray and Serve (the launcher)."""

    model_config = _group("MEMSERVE_RAY_")

    address: str | None = None  # unset: start a local Ray
    num_cpus: int | None = None
    dashboard: bool = True
    metrics_port: int | None = None  # Prometheus port of the local Ray node; unset: Ray's
    # Ray starts workers (the replicas) at nice 15, so anything else on the box (the
    # database, a sidecar) takes their CPU first. The replicas are the service: nice 0.
    worker_niceness: int = 0
    throughput_optimized: bool = Field(  # RAY_SERVE_THROUGHPUT_OPTIMIZED=1
        True, validation_alias=_env("MEMSERVE_SERVE_THROUGHPUT_OPTIMIZED")
    )
    # HAProxy as Serve's HTTP ingress (RAY_SERVE_ENABLE_HA_PROXY); Serve's Python proxy
    # is the fallback where the haproxy binary cannot run.
    haproxy: bool = Field(True, validation_alias=_env("MEMSERVE_HAPROXY"))
    # Shutdown: proxies report unhealthy (so a load balancer stops sending) for at least
    # this long, then wait for their in-flight requests (RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S).
    drain_min_s: float = Field(0.5, validation_alias=_env("MEMSERVE_DRAIN_MIN_S"))


class DatabaseSettings(BaseSettings):
    model_config = _group("MEMSERVE_DB_")

    pool_min: int = 1
    pool_max: int = 10
    connect_timeout_s: float = 3.0
    pool_timeout_s: float = 3.0  # how long a request waits for a connection before 503
    pool_check_idle_s: float = 1.0  # ping a pooled connection idle longer than this
    statement_timeout_ms: int = 5000
    # No DSN outside the launcher: attach to/start the embedded PostgreSQL.
    embedded_autostart: bool = Field(True, validation_alias=_env("MEMSERVE_EMBEDDED_AUTOSTART"))
    # The launcher restarts a crashed embedded PostgreSQL after this long; 0: off.
    embedded_watchdog_s: float = Field(1.0, validation_alias=_env("MEMSERVE_EMBEDDED_WATCHDOG_S"))
    # How often DB pool gauges are sampled.
    metrics_interval_s: float = Field(
        5.0, validation_alias=_env("MEMSERVE_POOL_METRICS_INTERVAL_S")
    )


class LimitSettings(BaseSettings):
    """Input limits: what a request may carry (4xx beyond)."""

    model_config = _group("MEMSERVE_MAX_")

    content_chars: int = 8000
    batch_items: int = 100
    import_records: int = 5000  # records per POST /v1/import (413 beyond; the CLI splits)
    top_k: int = 100
    list_limit: int = 200
    body_bytes: int = 1_048_576
    tags: int = 32
    tag_chars: int = 64
    metadata_bytes: int = 16_384
    id_chars: int = 128
    history_items: int = 50  # history messages per /v1/context request
    chat_messages: int = 256  # messages per /v1/chat/completions request
    context_token_budget: int = 8000
    default_top_k: int = Field(10, validation_alias=_env("MEMSERVE_DEFAULT_TOP_K"))


class EmbedSettings(BaseSettings):
    model_config = _group("MEMSERVE_EMBED_")

    model: str = "all-minilm-l6-v2-int8"  # spec name or model directory (contract variable)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = None  # ONNX Runtime intra-op threads; default: the replica's CPUs
    max_batch_size: int = 32
    # Idle-encoder wait for a batch to fill; while a batch runs, callers queue anyway.
    batch_wait_s: float = 0.001
    # Padded tokens per ONNX Runtime run (texts sorted by length, split into runs of
    # at most this many); default: 512 on CPU (cache-sized runs), 16384 on CUDA.
    max_batch_tokens: int | None = None
    # ONNX Runtime idle threads busy-wait when True; off by default because replicas share
    # CPUs with other deployments (and Postgres), whose work spinning threads would steal.
    spinning: bool = False
    models_cache: Path | None = Field(None, validation_alias=_env("MEMSERVE_MODELS_CACHE"))


class CacheSettings(BaseSettings):
    """The retriever's FAISS/BM25 hot cache, per replica."""

    model_config = _group("MEMSERVE_CACHE_")

    budget_mb: int = 512  # 0 disables the cache (pgvector only)
    hnsw_threshold: int = 20_000  # owners above this many vectors get FAISS HNSW, else flat
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 128
    sync_load_max: int = 50_000  # colder/larger owners: answer from pgvector, load behind
    filter_max_ids: int = 5_000  # filtered search in the cache up to this many matches
    faiss_threads: int = 1  # OpenMP threads of FAISS (single queries gain nothing)


class RetrievalSettings(BaseSettings):
    """Candidate generation, fusion and routing (names as the historic variables)."""

    model_config = _group("MEMSERVE_")

    hnsw_ef_search: int = 64  # pgvector
    retrieval_shards: int = 64  # shard key = crc32(user) % shards, the multiplexed model id
    retrieval_shards_per_replica: int = 64  # Serve multiplexing: shards a replica keeps warm
    pg_exact_scan_max: int = 5_000  # owners up to this size: exact scan via the owner btree
    # A global pgvector HNSW index on the vector tables (m, ef_construction below). Off:
    # every query is per owner, so the owner btree answers all of them exactly, and a
    # write skips HNSW insertion (issue 23, loadtests/bench_insert.py at 100k rows: a
    # 100-row insert 12 ms vs 1.6 s, cold 10k-row owner p50 23 ms either way, recall@10
    # 1.0 vs 0.96). On for owners far above pg_exact_scan_max that are often cold.
    pg_hnsw: bool = False
    pg_hnsw_m: int = 16
    pg_hnsw_ef_construction: int = 64
    dense_depth: int = 100  # dense candidates fused per search (at least 3 x top_k)
    lexical_depth: int = 100  # lexical candidates fused per search
    # Hybrid fusion on cached owners (RRF always when cold).
    fusion: Literal["zscore", "rrf"] = "zscore"
    fusion_alpha: float = 0.7  # zscore: weight of z(cosine) vs z(BM25) (0.6 before issue 16)
    # zscore: share of the best adjacent memory's (creation order) fused score a memory
    # gets (chat turns: the answer sits next to the matching turn); 0: off. Scaled by the
    # owner's sequential coherence, full from fusion_neighbour_coherence (chats ~0.2,
    # unrelated documents ~0), see serve_app/retrieval/neighbours.py
    fusion_neighbour_weight: float = 0.4
    fusion_neighbour_coherence: float = 0.1
    fusion_full_max: int = 50_000  # zscore needs every score of the owner; bigger: RRF
    rrf_k: int = 10
    rrf_w_dense: float = 1.0
    rrf_w_lexical: float = 1.0
    bm25_k1: float = 1.2
    bm25_b: float = 0.3  # short memories: weak length normalisation (measured on LoCoMo)
    # Signals added to the z-score fusion on cached owners (serve_app/retrieval/signals.py;
    # LoCoMo dev per conversation in loadtests/results/eval_signals*.json):
    entity_weight: float = 0.0  # x idf of the query's proper nouns a memory names (dev: no gain)
    time_weight: float = 1.0  # x time fit ("when", a named period, "recently")
    expand_seeds: int = 3  # the best hits whose rare entities and session lend a bonus
    expand_entity_weight: float = 0.0  # x idf of a seed's rare entities (dev: no gain)
    expand_session_weight: float = 0.6  # flat bonus for a seed's session
    session_cap: int = 0  # at most this many results per session before others (0: off)
    mmr_penalty: float = 0.0  # x max cosine to better hits (maximal marginal relevance)
    # Who embeds a search's query (issue 23): the Retriever replica (one Serve hop per search)
    # or the Embedder (batched with others; GPU clusters). MEMSERVE_QUERY_EMBED.
    query_embed: Literal["retriever", "embedder"] = "retriever"


class RankSettings(BaseSettings):
    """Final score = w_similarity * cosine + w_importance * importance + w_recency * recency."""

    model_config = _group("MEMSERVE_RANK_")

    w_similarity: float = 0.8
    w_importance: float = 0.1
    w_recency: float = 0.1
    recency_half_life_days: float = 30.0
    # What recency measures: "updated" (last write) or "accessed" (last time search or
    # context returned the memory, else its last write; see serve_app.services.access).
    recency_from: Literal["updated", "accessed"] = "updated"


class LifecycleSettings(BaseSettings):
    """Forget, expiry purge and access tracking (issue 12)."""

    model_config = _group("MEMSERVE_LIFECYCLE_")

    forget_batch: int = 2000  # rows per delete statement of a forget (each << statement timeout)
    purge_interval_s: float = 60.0  # expired memories are purged this often; 0: never
    purge_batch: int = 1000  # rows per purge statement
    purge_max_batches: int = 50  # statements per purge round (the rest waits for the next)
    erasure_keep_s: float = 86400.0  # finished erasure records kept (extraction leases << this)
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

    model_config = _group("MEMSERVE_QUOTA_")

    max_memories_per_user: int = 0
    max_memories_per_tenant: int = 0
    max_facts_per_user: int = 0  # active fact keys (a new value of a key is free)
    max_facts_per_tenant: int = 0


class LLMSettings(BaseSettings):
    """The OpenAI-compatible endpoint of extraction and the chat proxy (unset: off)."""

    model_config = _group("MEMSERVE_LLM_")

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 2
    backoff_s: float = 0.5
    breaker_failures: int = 5  # consecutive failed calls that open the breaker
    breaker_reset_s: float = 30.0  # an open breaker lets one trial call through after this
    max_tokens: int = 1024
    # The chat proxy's upstream call (answers can be long; extraction uses timeout_s).
    chat_timeout_s: float = Field(120.0, validation_alias=_env("MEMSERVE_CHAT_TIMEOUT_S"))


class ExtractSettings(BaseSettings):
    model_config = _group("MEMSERVE_EXTRACT_")

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
    # /mem0 add with infer waits this long for the extraction's event list (then: PENDING)
    sync_wait_s: float = 20.0
    # Uncompressed turns that trigger an episodic summary; newest turns left out of it.
    compress_every_m_turns: int = Field(
        20, validation_alias=_env("MEMSERVE_COMPRESS_EVERY_M_TURNS")
    )
    compress_keep_window: int = Field(10, validation_alias=_env("MEMSERVE_COMPRESS_KEEP_WINDOW"))
    # Turns older than this are dropped once extracted.
    turn_ttl_hours: float = Field(72.0, validation_alias=_env("MEMSERVE_SESSION_TURN_TTL_HOURS"))
    # Prompt guidance (mem0's names; tenants override). Categories: JSON {"name": "what"}.
    custom_instructions: str = ""
    includes: str = ""
    excludes: str = ""
    custom_categories: dict[str, str] = Field(default_factory=dict)


class ConsolidateSettings(BaseSettings):
    """Periodic per-user consolidation: merge, insights, episode digests, decay."""

    model_config = _group("MEMSERVE_CONSOLIDATE_")

    interval_s: float = 600.0  # how often an extractor replica looks for users; 0: off
    min_interval_s: float = 3600.0  # a user is consolidated at most this often
    users_per_tick: int = 20
    max_memories: int = 20_000  # memories of a user looked at per run
    merge_similarity: float = 0.9  # near-duplicates at or above this merge
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

    model_config = _group("MEMSERVE_REEMBED_")

    rate_per_s: float = 200.0  # texts per second re-embedded (0: as fast as it goes)
    batch: int = 64  # texts per embedder call and per write
    poll_s: float = 5.0  # replicas re-read the model registry this often (NOTIFY is at once)
    settle_s: float = 30.0  # after a switch: repair passes for replicas that had not switched
    margin_s: float = 30.0  # longest write transaction the repair watermark allows for


class ContextSettings(BaseSettings):
    model_config = _group("MEMSERVE_CONTEXT_")

    token_budget: int = 1000  # default budget of a context block (approx. tokens)
    top_k: int = 10  # memories considered for a context block
    threshold: float = 0.2  # min cosine similarity of a memory in a context block
    max_facts: int = 50
    # Session-scope memories expire after this; 0: never.
    session_ttl_s: float = Field(86400.0, validation_alias=_env("MEMSERVE_SESSION_TTL_S"))


class AuthSettings(BaseSettings):
    model_config = _group("MEMSERVE_AUTH_")

    cache_ttl_s: float = 60.0  # authenticated keys cached per ingress replica; 0: off
    cache_max_keys: int = 100_000  # (revocations reach the cache via NOTIFY at once)
    # Unknown keys are remembered this long (a new key's INSERT notifies and clears it).
    negative_ttl_s: float = 10.0
    # Unknown-key lookups per client address (per replica) before it gets 429 without a
    # database round trip: sustained rate and burst; 0: off.
    bad_key_per_s: float = 5.0
    bad_key_burst: int = 50
    # Refusals answered before routing (known-bad key, address out of budget) are held
    # this long first: a closed-loop flood slows to connections/delay, at no CPU cost.
    stranger_delay_s: float = 0.5
    # The key listener pings its connection this often; the cache is trusted only while
    # the last ping (or notification) is younger than stale_s.
    listener_ping_s: float = 1.0
    listener_stale_s: float = 3.0
    # Work units (1 per item, a request without items is one, plus 1 per KiB of body:
    # ~256 embedded tokens) per (key, end user), token bucket per ingress replica; 0: off.
    # A key's own rate_limit_per_s overrides the rate. High by default: one end user of
    # bench_vs_mem0 (8 clients) never reaches it, a flood of 100-item batches does.
    rate_limit_per_s: float = Field(2000.0, validation_alias=_env("MEMSERVE_RATE_LIMIT_PER_S"))
    rate_limit_burst: int = Field(4000, validation_alias=_env("MEMSERVE_RATE_LIMIT_BURST"))
    # Optional aggregate over all end users of one key (units/s); 0: off.
    key_rate_limit_per_s: float = Field(0.0, validation_alias=_env("MEMSERVE_RATE_LIMIT_KEY_PER_S"))
    key_rate_limit_burst: int = Field(0, validation_alias=_env("MEMSERVE_RATE_LIMIT_KEY_BURST"))
    rate_limit_max_keys: int = Field(  # buckets kept per replica (LRU)
        100_000, validation_alias=_env("MEMSERVE_RATE_LIMIT_MAX_KEYS")
    )


class ChatSettings(BaseSettings):
    """Caps of the chat proxy: what a caller may spend of the operator's upstream key."""

    model_config = _group("MEMSERVE_CHAT_")

    # Comma-separated allow-list of `model` values; empty: only MEMSERVE_LLM_MODEL.
    models: str = ""
    max_n: int = 4
    max_tokens: int = 4096  # max_tokens / max_completion_tokens; also the default
    # The field the default goes in when a request names neither (OpenAI's reasoning
    # models accept only max_completion_tokens; most other servers know max_tokens).
    default_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    max_tools: int = 32
    usage_flush_s: float = 2.0  # how often the per-key use sums are written (chat_usage)
    usage_max_pending: int = 10_000  # (key, day) sums held before an early flush


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMSERVE_", extra="ignore")

    # --- contract variables (DESIGN §8) and the service's identity ---
    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)
    bootstrap_key: str | None = None
    admin_key: str | None = None  # admin key of the default tenant (key management)
    default_tenant: str = "default"
    host: str = "127.0.0.1"
    port: int = 8000
    serve_config: Path | None = None  # Serve config YAML; default: the packaged one

    # --- one group per component ---
    serving: ServingSettings = Field(default_factory=ServingSettings)
    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rank: RankSettings = Field(default_factory=RankSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    quota: QuotaSettings = Field(default_factory=QuotaSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    extract: ExtractSettings = Field(default_factory=ExtractSettings)
    consolidate: ConsolidateSettings = Field(default_factory=ConsolidateSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    reembed: ReembedSettings = Field(default_factory=ReembedSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)

    @property
    def models_dir(self) -> Path:
        return self.embed.models_cache or self.data_dir / "models"

    def with_(self, **groups: dict[str, Any]) -> Settings:
        """A copy with some groups' fields replaced: ``s.with_(retrieval={"fusion": "rrf"})``."""
        update = {g: getattr(self, g).model_copy(update=fields) for g, fields in groups.items()}
        return self.model_copy(update=update)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    from serve_app.secret_env import load_secrets_file

    load_secrets_file()  # this node's secrets (never shipped in Ray's runtime env)
    return Settings()
