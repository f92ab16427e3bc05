"""The Extractor deployment on Ray Serve with a real Embedder, Postgres and the scripted LLM."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
from tests.deployments.extractor_app import extractor_db, serve_extractor

APP = "extractor-test"


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with extractor_db(pg_admin_dsn, "t_ext") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def extractor(ray_session, db, llm):
    env = {
        "MEMSERVE_LLM_TIMEOUT_S": "1",
        "MEMSERVE_LLM_BREAKER_FAILURES": "1",
        "MEMSERVE_LLM_BREAKER_RESET_S": "0.5",
        "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "3600",  # scans are driven by the test
    }
    with serve_extractor(
        APP, "ExtractorUnderTest", "EmbedderForExtractor", db=db, llm_url=llm.url, env=env
    ) as handle:
        yield handle


async def test_process_is_fire_and_forget_and_extracts(extractor, llm, turns):
    llm.reset()
    llm.set_mode("delay", delay_s=0.8)
    llm.add_rule(
        "Lisbon",
        extraction([memory("The user lives in Lisbon")], [fact("identity", "city", "Lisbon")]),
    )
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
