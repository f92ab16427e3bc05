"""How the service is started, reached and guarded: Ray, database, limits, auth, chat proxy."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from serve_app.settings.base import env, group


class ServingSettings(BaseSettings):
    """How `make run` starts Ray and Serve (the launcher)."""

    model_config = group("MEMSERVE_RAY_")

    address: str | None = None  # unset: start a local Ray
    num_cpus: int | None = None
    dashboard: bool = True
    metrics_port: int | None = None  # Prometheus port of the local Ray node; unset: Ray's
    # Ray starts workers (the replicas) at nice 15, so anything else on the box (the
    # database, a sidecar) takes their CPU first. The replicas are the service: nice 0.
    worker_niceness: int = 0
    throughput_optimized: bool = Field(  # RAY_SERVE_THROUGHPUT_OPTIMIZED=1
        True, validation_alias=env("MEMSERVE_SERVE_THROUGHPUT_OPTIMIZED")
    )
    # HAProxy as Serve's HTTP ingress (RAY_SERVE_ENABLE_HA_PROXY); Serve's Python proxy
    # is the fallback where the haproxy binary cannot run.
    haproxy: bool = Field(True, validation_alias=env("MEMSERVE_HAPROXY"))
    # Shutdown: proxies report unhealthy (so a load balancer stops sending) for at least
    # this long, then wait for their in-flight requests (RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S).
    drain_min_s: float = Field(0.5, validation_alias=env("MEMSERVE_DRAIN_MIN_S"))


class DatabaseSettings(BaseSettings):
    model_config = group("MEMSERVE_DB_")

    pool_min: int = 1
    pool_max: int = 10
    connect_timeout_s: float = 3.0
    pool_timeout_s: float = 3.0  # how long a request waits for a connection before 503
    pool_check_idle_s: float = 1.0  # ping a pooled connection idle longer than this
    statement_timeout_ms: int = 5000
    # No DSN outside the launcher: attach to/start the embedded PostgreSQL.
    embedded_autostart: bool = Field(True, validation_alias=env("MEMSERVE_EMBEDDED_AUTOSTART"))
    # The launcher restarts a crashed embedded PostgreSQL after this long; 0: off.
    embedded_watchdog_s: float = Field(1.0, validation_alias=env("MEMSERVE_EMBEDDED_WATCHDOG_S"))
    # How often DB pool gauges are sampled.
    metrics_interval_s: float = Field(5.0, validation_alias=env("MEMSERVE_POOL_METRICS_INTERVAL_S"))


class LimitSettings(BaseSettings):
    """Input limits: what a request may carry (4xx beyond)."""

    model_config = group("MEMSERVE_MAX_")

    content_chars: int = 8000
    batch_items: int = 100
    import_records: int = 5000  # records per POST /v1/import (413 beyond; the CLI splits)
    top_k: int = 100
    list_limit: int = 200
    entities_listed: int = 1000  # of each kind on mem0's GET /v1/entities/ (totals stay exact)
    body_bytes: int = 1_048_576
    tags: int = 32
    tag_chars: int = 64
    metadata_bytes: int = 16_384
    id_chars: int = 128
    history_items: int = 50  # history messages per /v1/context request
    history_events: int = 1000  # a memory's events a history read returns (the newest)
    chat_messages: int = 256  # messages per /v1/chat/completions request
    context_token_budget: int = 8000
    default_top_k: int = Field(10, validation_alias=env("MEMSERVE_DEFAULT_TOP_K"))


class IngestSettings(BaseSettings):
    """How a batch add reaches the database."""

    model_config = group("MEMSERVE_INGEST_")

    # A batch longer than this is embedded and inserted in chunks of this many items,
    # the next chunk embedding while the last one inserts, in one transaction (all or
    # nothing as before; services/ingest_pipeline.py); 0: embed all, then one insert.
    # Off by default: where the encoder and PostgreSQL share the cores it cost 17% of
    # batch ingest (docs/operations.md); 32 where inserts take time of their own (a remote
    # database, the global HNSW index on).
    pipeline_chunk: int = Field(0, ge=0)


class AuthSettings(BaseSettings):
    model_config = group("MEMSERVE_AUTH_")

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
    rate_limit_per_s: float = Field(2000.0, validation_alias=env("MEMSERVE_RATE_LIMIT_PER_S"))
    rate_limit_burst: int = Field(4000, validation_alias=env("MEMSERVE_RATE_LIMIT_BURST"))
    # Optional aggregate over all end users of one key (units/s); 0: off.
    key_rate_limit_per_s: float = Field(0.0, validation_alias=env("MEMSERVE_RATE_LIMIT_KEY_PER_S"))
    key_rate_limit_burst: int = Field(0, validation_alias=env("MEMSERVE_RATE_LIMIT_KEY_BURST"))
    rate_limit_max_keys: int = Field(  # buckets kept per replica (LRU)
        100_000, validation_alias=env("MEMSERVE_RATE_LIMIT_MAX_KEYS")
    )


class IdentitySettings(BaseSettings):
    """Tokens (JWTs) from a tenant's trusted issuers (serve_app/identity/)."""

    model_config = group("MEMSERVE_IDENTITY_")

    # JWKS URLs that resolve to private, loopback or link-local addresses are refused
    # (SSRF: a tenant admin must not make replicas call the cluster's insides); on for
    # an IdP inside the operator's network (Keycloak next to memserve) and for tests.
    allow_private_jwks: bool = False
    fetch_timeout_s: float = Field(3.0, gt=0, le=60)  # whole fetch: resolve, connect, read
    jwks_max_bytes: int = Field(256 * 1024, ge=1024)  # an answer longer than this is refused
    jwks_ttl_s: float = Field(600.0, ge=0)  # keys are refetched after this (old kept on error)
    # A token whose kid is not in the cached keys refetches at most this often per JWKS.
    refresh_min_interval_s: float = Field(30.0, ge=0)
    max_concurrent_fetches: int = Field(8, ge=1)  # outbound JWKS fetches per replica
    max_token_chars: int = Field(8192, ge=256)  # longer is refused before parsing
    # Verified tokens remembered per replica (until their exp, at most verified_ttl_s):
    # a repeated token costs a hash, like a cached API key.
    verified_cache_max: int = Field(100_000, ge=0)
    verified_ttl_s: float = Field(60.0, ge=0)
    issuers_cache_max: int = Field(10_000, ge=1)  # JWKS sets and issuer lookups kept
    # The service's public base URL (https://memory.example.com) in the OAuth protected
    # resource metadata of /mcp; unset: taken from each request's scheme and Host.
    public_url: str | None = None


class ChatSettings(BaseSettings):
    """Caps of the chat proxy: what a caller may spend of the operator's upstream key."""

    model_config = group("MEMSERVE_CHAT_")

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
