"""The Extractor deployment on Ray Serve with a real Embedder, Postgres and the scripted LLM."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve_app.bootstrap import ModelFacts
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from tests.conftest import scratch_database
from tests.fakes.llm_server import FakeLLM, extraction, fact, memory

APP = "extractor-test"
MODEL = ModelFacts("all-minilm-l6-v2-int8", 384, "all_minilm_l6_v2_int8")


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with scratch_database(pg_admin_dsn, "t_ext") as dsn:
        ensure_table(dsn, MODEL.table_slug, MODEL.dim)  # start-up work: the bootstrap's
        yield dsn


@pytest.fixture(scope="module")
def llm():
    server = FakeLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def extractor(ray_session, db, llm):
    from ray import serve

    from deployments.embedder import Embedder
    from deployments.extractor import Extractor

    env = {
        "MEMSERVE_DATABASE_URL": db,
        "MEMSERVE_EMBED_MODEL": "all-minilm-l6-v2-int8",
        "MEMSERVE_LLM_BASE_URL": llm.url,
        "MEMSERVE_LLM_TIMEOUT_S": "1",
        "MEMSERVE_LLM_MAX_RETRIES": "0",
        "MEMSERVE_LLM_BREAKER_FAILURES": "1",
        "MEMSERVE_LLM_BREAKER_RESET_S": "0.5",
        "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "3600",  # scans are driven by the test
        "MEMSERVE_EXTRACT_EVERY_N_TURNS": "1",
    }
    opts = {"runtime_env": {"env_vars": env}, "num_cpus": 0.1}
    embedder = Embedder.options(name="EmbedderForExtractor", ray_actor_options=opts).bind(
        device="cpu"
    )
    app = Extractor.options(name="ExtractorUnderTest", ray_actor_options=opts).bind(MODEL, embedder)
    handle = serve.run(app, name=APP, route_prefix=None)
    yield handle
    serve.delete(APP)


@pytest.fixture
async def turns(db):
    pool = await open_pool(db, Settings(), min_size=1)
    await pool.wait()
    yield TurnStore(pool)
    await pool.close()


async def test_process_is_fire_and_forget_and_extracts(extractor, llm, turns):
    llm.reset()
    llm.set_mode("delay", delay_s=0.8)
    llm.add_rule("Lisbon", extraction([memory("The user lives in Lisbon")],
                                      [fact("identity", "city", "Lisbon")]))  # fmt: skip
    key = SessionKey("default", "ray-u1", "s1")
    await turns.append(key, [("user", "I live in Lisbon")], agent_id=None, ttl_hours=1)
    started = time.perf_counter()
    assert await extractor.process.remote(*key.as_tuple()) == "accepted"
    assert time.perf_counter() - started < 0.5  # did not wait for the LLM
    out = await extractor.process_now.remote(*key.as_tuple())  # joins the running job
    assert out["saved"] == 1 and out["facts"] == {"added": 1}
    assert await turns.pending_count(key) == 0
    status = await extractor.status.remote()
    assert status["enabled"] and status["counts"]["successes"] >= 1


async def test_outage_keeps_turns_until_the_scan(extractor, llm, turns):
    llm.reset()
    llm.down()
    key = SessionKey("default", "ray-u2", "s1")
    await turns.append(key, [("user", "I am a nurse")], agent_id=None, ttl_hours=1)
    out = await extractor.process_now.remote(*key.as_tuple())
    assert out["error"] == "connect"
    assert await turns.pending_count(key) == 1
    assert (await extractor.status.remote())["llm_circuit"] == "open"
    llm.up()
    llm.add_rule("nurse", extraction([memory("The user works as a nurse")]))
    await asyncio.sleep(0.6)  # breaker half-opens
    assert await extractor.scan_now.remote() >= 1
    assert await turns.pending_count(key) == 0
