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

    # --- database ---
    db_pool_min: int = 1
    db_pool_max: int = 10
    db_connect_timeout_s: float = 3.0
    db_pool_timeout_s: float = 3.0  # how long a request waits for a connection before 503
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
    embed_batch_wait_s: float = 0.005
    embed_max_batch_tokens: int = 8192
    models_cache: Path | None = None  # default: <data_dir>/models

    # --- retrieval / ranking ---
    hnsw_ef_search: int = 64
    rank_w_similarity: float = 0.8
    rank_w_importance: float = 0.1
    rank_w_recency: float = 0.1
    rank_recency_half_life_days: float = 30.0

    @property
    def models_dir(self) -> Path:
        return self.models_cache or self.data_dir / "models"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
