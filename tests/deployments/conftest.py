"""Ray fixtures for deployment tests: one local Ray for this package, shut down after it.

Package scope keeps Ray from lingering while later packages start whole services
(each with its own Ray): on 2 cores, concurrent Ray start-ups can miss Ray's fixed
30 s node start-up deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.turns import TurnStore
from serve_app.testing.llm_server import FakeLLM


@pytest.fixture(scope="package")
def ray_session() -> Iterator[None]:
    """A 2-CPU local Ray; reuses one another module already started."""
    import ray

    started = False
    if not ray.is_initialized():
        # "local": never join another worker's service cluster on this machine.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        started = True
    yield
    if started:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="package")
def embedder_handle(ray_session: None):
    """The Embedder deployment alone, with small batches set through user_config."""
    from ray import serve

    from deployments.embedder import Embedder

    app = Embedder.options(
        name="EmbedderUnderTest",
        user_config={"max_batch_size": 8, "batch_wait_timeout_s": 0.002},
        ray_actor_options={"num_cpus": 1},
    ).bind(model="all-minilm-l6-v2-int8", device="cpu")
    handle = serve.run(app, name="embedder-test", route_prefix=None)
    yield handle
    serve.delete("embedder-test")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    """The scripted LLM server of one Extractor test module."""
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture
async def turns(db: str) -> AsyncIterator[TurnStore]:
    """The turn store over the module's ``db`` (its own pool, closed afterwards)."""
    pool = await open_pool(db, Settings(), min_size=1)
    await pool.wait()
    yield TurnStore(pool)
    await pool.close()
