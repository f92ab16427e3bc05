"""The Extractor deployment with its own Embedder, for the Extractor's Ray Serve tests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ray.serve.handle import DeploymentHandle

from serve_app.bootstrap import ModelFacts
from serve_app.store.vectors import ensure_table
from tests.conftest import scratch_database

MODEL = ModelFacts("all-minilm-l6-v2-int8", 384, "all_minilm_l6_v2_int8")


@contextmanager
def extractor_db(admin_dsn: str, prefix: str) -> Iterator[str]:
    """A scratch database with the model's vector table (the bootstrap's start-up work)."""
    with scratch_database(admin_dsn, prefix) as dsn:
        ensure_table(dsn, MODEL.table_slug, MODEL.dim)
        yield dsn


@contextmanager
def serve_extractor(
    app: str,
    deployment: str,
    embedder: str,
    *,
    db: str,
    llm_url: str,
    env: Mapping[str, str],
    replicas: int = 1,
) -> Iterator[DeploymentHandle]:
    """Run Extractor ``deployment`` (``replicas`` of it, and Embedder ``embedder``) as
    Serve app ``app`` on ``db`` and the scripted LLM at ``llm_url``, extracting every
    turn, with ``env`` on top; delete the app afterwards."""
    from ray import serve

    from deployments.embedder import Embedder
    from deployments.extractor import Extractor

    env_vars = {
        "MEMSERVE_DATABASE_URL": db,
        "MEMSERVE_EMBED_MODEL": MODEL.name,
        "MEMSERVE_LLM_BASE_URL": llm_url,
        "MEMSERVE_LLM_MAX_RETRIES": "0",
        "MEMSERVE_EXTRACT_EVERY_N_TURNS": "1",
        **env,
    }
    opts = {"runtime_env": {"env_vars": env_vars}, "num_cpus": 0.1}
    bound = Embedder.options(name=embedder, ray_actor_options=opts).bind(device="cpu")
    handle = serve.run(
        Extractor.options(name=deployment, num_replicas=replicas, ray_actor_options=opts).bind(
            MODEL, bound
        ),
        name=app,
        route_prefix=None,
    )
    yield handle
    serve.delete(app)
