"""All runtime settings in one place.

Values come from ``MEMSERVE_*`` environment variables (names in DESIGN §8 are a
contract). Scaling (replicas, CPUs, GPUs, autoscaling) lives in the Serve config
file, not here; per-deployment tuning that Serve can hot-reload arrives as
``user_config`` and overrides these defaults.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("memserve"))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMSERVE_", extra="ignore")

    # --- contract variables (DESIGN §8) ---
    database_url: str | None = None
    data_dir: Path = Field(default_factory=_default_data_dir)
    bootstrap_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    embed_model: str = "all-minilm-l6-v2-int8"
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str | None = None

    # --- service ---
    serve_config: Path | None = None  # Serve config YAML; default: the packaged one
    admin_key: str | None = None  # admin key of the default tenant (key management)
    default_tenant: str = "default"
    ray_address: str | None = None  # unset: start a local Ray
    ray_num_cpus: int | None = None
    ray_dashboard: bool = True
    serve_throughput_optimized: bool = True  # RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (make run)
    haproxy: bool = True  # HAProxy in front of Serve where its binary runs (ingress_proxy)
    # Shutdown: proxies report unhealthy (so a load balancer stops sending) for at least
    # this long, then wait for their in-flight requests (RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S).
    drain_min_s: float = 0.5
    # Ray starts workers (the replicas) at nice 15, so anything else on the box (the
    # database, a sidecar) takes their CPU first. The replicas are the service: nice 0.
    ray_worker_niceness: int = 0

    # --- database ---
    db_pool_min: int = 1
    db_pool_max: int = 10
    db_connect_timeout_s: float = 3.0
    db_pool_timeout_s: float = 3.0  # how long a request waits for a connection before 503
    db_pool_check_idle_s: float = 1.0  # ping a pooled connection idle longer than this
    db_statement_timeout_ms: int = 5000

    # --- limits ---
    max_content_chars: int = 8000
    max_batch_items: int = 100
    max_top_k: int = 100
    default_top_k: int = 10
    max_list_limit: int = 200
    max_body_bytes: int = 1_048_576
    max_tags: int = 32
    max_tag_chars: int = 64
    max_metadata_bytes: int = 16_384
    max_id_chars: int = 128

    # --- embedder ---
    embed_device: str = "auto"  # auto | cpu | cuda
    embed_threads: int | None = None  # ONNX Runtime intra-op threads; default: replica CPUs
    embed_max_batch_size: int = 32
    # Idle-encoder wait for a batch to fill; while a batch runs, callers queue anyway.
    embed_batch_wait_s: float = 0.001
    # Padded tokens per ONNX Runtime run (texts sorted by length, split into runs of
    # at most this many); default: 512 on CPU (cache-sized runs), 16384 on CUDA.
    embed_max_batch_tokens: int | None = None
    # ONNX Runtime idle threads busy-wait when True; off by default because replicas share
    # CPUs with other deployments (and Postgres), whose work spinning threads would steal.
    embed_spinning: bool = False
    models_cache: Path | None = None  # default: <data_dir>/models

    # --- retrieval / ranking ---
    hnsw_ef_search: int = 64
    rank_w_similarity: float = 0.8
    rank_w_importance: float = 0.1
    rank_w_recency: float = 0.1
    rank_recency_half_life_days: float = 30.0

    # --- retrieval cache (issue 4; FAISS hot cache, hybrid fusion, pgvector fallback) ---
    cache_budget_mb: int = 512  # per retriever replica; 0 disables the cache (pgvector only)
    cache_hnsw_threshold: int = 20_000  # owners above this many vectors get FAISS HNSW, else flat
    cache_hnsw_m: int = 32
    cache_hnsw_ef_construction: int = 80
    cache_hnsw_ef_search: int = 128
    cache_sync_load_max: int = 50_000  # colder/larger owners: answer from pgvector, load behind
    cache_filter_max_ids: int = 5_000  # filtered search in the cache up to this many matches
    cache_faiss_threads: int = 1  # OpenMP threads of FAISS (single queries gain nothing)
    retrieval_shards: int = 64  # shard key = crc32(user) % shards, the multiplexed model id
    retrieval_shards_per_replica: int = 64  # Serve multiplexing: shards a replica keeps warm
    pg_exact_scan_max: int = 5_000  # owners up to this size: exact scan via the owner btree
    dense_depth: int = 100  # dense candidates fused per search (at least 3 x top_k)
    lexical_depth: int = 100  # lexical candidates fused per search
    fusion: str = "zscore"  # hybrid fusion on cached owners: zscore | rrf (RRF always when cold)
    fusion_alpha: float = 0.6  # zscore: weight of z(cosine) vs z(BM25)
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

    # --- extraction (issue 5; LLM endpoint: llm_* contract variables above) ---
    extract_every_n_turns: int = 4  # user turns per session between extractions
    compress_every_m_turns: int = 20  # uncompressed turns that trigger an episodic summary
    compress_keep_window: int = 10  # newest turns left out of a summary
    session_turn_ttl_hours: float = 72.0  # turns older than this are dropped once extracted
    extract_min_confidence: float = 0.4
    extract_min_importance: float = 0.2
    extract_merge_similarity: float = 0.9  # >= this to an existing memory: merge, not add
    extract_restatement_similarity: float = 0.75  # assistant sentence vs memory: junk
    extract_max_turns: int = 40  # turns per LLM call
    extract_max_attempts: int = 3  # unparseable answers before a batch is dead-lettered
    extract_concurrency: int = 8  # LLM calls in flight per extractor replica
    extract_scan_interval_s: float = 10.0  # re-scan of the durable queue (pending turns)
    extract_idle_s: float = 300.0  # pending turns this old are extracted below N
    extract_lease_s: float = 180.0  # claim on turns being extracted (crash recovery)
    llm_timeout_s: float = 30.0
    llm_max_retries: int = 2
    llm_backoff_s: float = 0.5
    llm_breaker_failures: int = 5  # consecutive failed calls that open the breaker
    llm_breaker_reset_s: float = 30.0  # open breaker lets one trial call through after this
    llm_max_tokens: int = 1024

    # --- context, scopes, chat proxy, rate limit (issue 6) ---
    context_token_budget: int = 1000  # default budget of a context block (approx. tokens)
    max_context_token_budget: int = 8000
    context_top_k: int = 10  # memories considered for a context block
    context_threshold: float = 0.2  # min cosine similarity of a memory in a context block
    context_max_facts: int = 50
    max_history_items: int = 50  # history messages per /v1/context request
    session_ttl_s: float = 86400.0  # session-scope memories expire after this; 0: never
    max_chat_messages: int = 256  # messages per /v1/chat/completions request
    chat_timeout_s: float = 120.0  # upstream LLM call of the chat proxy
    rate_limit_per_s: float = 50.0  # per API key, token bucket per ingress replica; 0: off
    rate_limit_burst: int = 100
    rate_limit_max_keys: int = 100_000  # buckets kept per replica (LRU)
    auth_cache_ttl_s: float = 60.0  # authenticated keys cached per ingress replica; 0: off
    auth_cache_max_keys: int = 100_000  # (revocations reach the cache via NOTIFY at once)

    # --- operations (issue 7) ---
    ray_metrics_port: int | None = None  # Prometheus port of the local Ray node; unset: Ray's
    pool_metrics_interval_s: float = 5.0  # how often DB pool gauges are sampled
    embedded_autostart: bool = True  # no DSN outside the launcher: attach to/start embedded PG
    embedded_watchdog_s: float = 1.0  # launcher restarts a crashed embedded PG; 0: off

    @property
    def models_dir(self) -> Path:
        return self.models_cache or self.data_dir / "models"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
