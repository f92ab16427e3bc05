"""An Extractor replica killed mid-batch loses no turn.

The scripted LLM holds its answer while the replica is killed (``ray.kill``) with the
call in flight; the turn stays claimed until the short lease (2 s) runs out, then the
replica Serve starts in its place finds it in its periodic scan and extracts it once.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from serve_app.bootstrap import ModelFacts
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from tests.conftest import scratch_database
from tests.fakes.llm_server import FakeLLM, extraction, memory

APP = "extractor-fault"
DEPLOYMENT = "ExtractorUnderFault"
MODEL = ModelFacts("all-minilm-l6-v2-int8", 384, "all_minilm_l6_v2_int8")
LEASE_S = 2.0


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with scratch_database(pg_admin_dsn, "t_extfault") as dsn:
        ensure_table(dsn, MODEL.table_slug, MODEL.dim)
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
        "MEMSERVE_LLM_TIMEOUT_S": "30",  # the held answer is not a timeout
        "MEMSERVE_LLM_MAX_RETRIES": "0",
        "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "0.5",
        "MEMSERVE_EXTRACT_LEASE_S": str(LEASE_S),
        "MEMSERVE_EXTRACT_EVERY_N_TURNS": "1",
        "MEMSERVE_CONSOLIDATE_INTERVAL_S": "0",
    }
    opts = {"runtime_env": {"env_vars": env}, "num_cpus": 0.1}
    embedder = Embedder.options(name="EmbedderForFault", ray_actor_options=opts).bind(device="cpu")
    app = Extractor.options(name=DEPLOYMENT, ray_actor_options=opts).bind(MODEL, embedder)
    handle = serve.run(app, name=APP, route_prefix=None)
    yield handle
    serve.delete(APP)


@pytest.fixture
async def turns(db):
    pool = await open_pool(db, Settings(), min_size=1)
    await pool.wait()
    yield TurnStore(pool)
    await pool.close()


def replica_names() -> list[str]:
    import ray

    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::") and f"{APP}#{DEPLOYMENT}#" in a["name"]
    )


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def test_replica_killed_mid_batch_loses_no_turn(extractor, llm, turns, db):
    import ray

    assert await extractor.status.remote()  # the replica is up
    [victim] = replica_names()
    llm.reset()
    llm.set_mode("delay", delay_s=8.0)  # the answer is held while we kill the replica
    llm.add_rule("oboe", extraction([memory("The user plays the oboe in a quintet")]))
    key = SessionKey("default", "fault-u1", "s1")
    await turns.append(key, [("user", "I play the oboe in a quintet")], agent_id=None,
                       ttl_hours=1)  # fmt: skip
    assert await extractor.process.remote(*key.as_tuple()) == "accepted"
    wait_for(lambda: llm.calls("extract"), 20, "the extraction call in flight")
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed_at = time.monotonic()
    llm.set_mode("ok")  # the next replica's call is answered at once
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT extracted_at, claimed_until > now() AS held FROM session_turns"
            " WHERE user_id = 'fault-u1'"
        ).fetchone()
    assert row is not None and row[0] is None and row[1], "the turn is still claimed, pending"

    wait_for(lambda: replica_names() and replica_names() != [victim], 60, "a new replica")
    deadline = time.monotonic() + 60
    while await turns.pending_count(key) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    recovered_s = time.monotonic() - killed_at
    assert await turns.pending_count(key) == 0, "the turn was lost with the replica"
    assert recovered_s >= LEASE_S - 0.5  # not before the dead replica's claim ran out
    with psycopg.connect(db) as conn:
        contents = [r[0] for r in conn.execute(
            "SELECT content FROM memory_items WHERE user_id = 'fault-u1' AND status = 'active'"
        )]  # fmt: skip
    assert contents == ["The user plays the oboe in a quintet"]  # once, not twice
    assert len(llm.calls("extract")) == 2  # the killed call and the new replica's
    status = await extractor.status.remote()
    assert status["counts"]["successes"] == 1 and status["llm_circuit"] == "closed"
