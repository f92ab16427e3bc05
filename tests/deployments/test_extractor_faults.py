"""An Extractor replica killed mid-batch loses no turn, and its paid call is metered.

The scripted LLM holds its answer while the replica is killed (``ray.kill``) with the
call in flight; the turn stays claimed until the short lease (2 s) runs out, then the
replica Serve starts in its place finds it in its periodic scan and extracts it once.
The killed call's intent (serve_app/store/llm_spend.py) stays open until the new
replica's reconciler closes it as lost: the metered calls are the calls served.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.deployments.extractor_app import extractor_db, serve_extractor

APP = "extractor-fault"
DEPLOYMENT = "ExtractorUnderFault"
LEASE_S = 2.0


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with extractor_db(pg_admin_dsn, "t_extfault") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def extractor(ray_session, db, llm):
    env = {
        "MEMSERVE_LLM_TIMEOUT_S": "30",  # the held answer is not a timeout
        "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "0.5",
        "MEMSERVE_EXTRACT_LEASE_S": str(LEASE_S),
        "MEMSERVE_CONSOLIDATE_INTERVAL_S": "0",
        "MEMSERVE_SPEND_INTENT_STALE_S": "12",  # > the held answer (8 s): not while in flight
        "MEMSERVE_SPEND_RECONCILE_INTERVAL_S": "0",  # closed by spend_upkeep_now below
    }
    with serve_extractor(
        APP, DEPLOYMENT, "EmbedderForFault", db=db, llm_url=llm.url, env=env
    ) as handle:
        yield handle


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
    await turns.append(key, [("user", "I play the oboe in a quintet")], agent_id=None, ttl_hours=1)
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
        contents = [
            r[0]
            for r in conn.execute(
                "SELECT content FROM memory_items WHERE user_id = 'fault-u1' AND status = 'active'"
            )
        ]
    assert contents == ["The user plays the oboe in a quintet"]  # once, not twice
    assert len(llm.calls("extract")) == 2  # the killed call and the new replica's
    status = await extractor.status.remote()
    assert status["counts"]["successes"] == 1 and status["llm_circuit"] == "closed"

    # The killed call was paid for: once its intent is stale it is counted, exactly once.
    wait_for(lambda: llm.served("extract")["calls"] == 2, 20, "the held answer served")
    while time.monotonic() - killed_at < 13:
        await asyncio.sleep(0.2)
    assert await extractor.spend_upkeep_now.remote() == 1
    assert await extractor.spend_upkeep_now.remote() == 0
    with psycopg.connect(db) as conn:
        calls, prompt, completion, lost = conn.execute(
            "SELECT sum(calls), sum(prompt_tokens), sum(completion_tokens), sum(estimated_calls)"
            " FROM llm_usage_daily WHERE tenant_id = 'default' AND user_id = 'fault-u1'"
            " AND purpose = 'extract'"
        ).fetchone()
    served = llm.served("extract")
    assert (calls, prompt, lost) == (2, served["prompt_tokens"], 1)
    assert completion >= served["completion_tokens"]  # the lost one at its max_tokens
