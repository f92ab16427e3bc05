"""The consolidation lease: no connection or transaction held across LLM calls, one run
per user at a time, a crashed run's lease taken over, a run that lost its lease writes
nothing, a forget of the user stops a run in flight."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.consolidation.job import Consolidator, run_due
from serve_app.consolidation.lease import Lease, LeaseLost
from serve_app.store import Owner
from serve_app.store.erasure import Erasure
from serve_app.store.forget import ForgetStore, Scope

ALICE = Owner("t1", "alice")
BOB = Owner("t1", "bob")
HIKING = [
    "The user goes hiking every weekend",
    "The user bought new hiking boots",
    "The user plans a hiking trip to the Alps",
]


async def _hiker(env) -> None:
    for text in HIKING:  # one cluster: one insight call
        await env.add(ALICE, text, type="fact")


async def _until_llm_called(fake_llm, n: int = 1) -> None:
    for _ in range(500):
        if len(fake_llm.calls("insight")) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the run never reached its LLM call")


async def _state(env, owner: Owner) -> dict:
    [row] = await env.sql(
        "SELECT claimed_until, claim_token, last_run_at FROM consolidation_state"
        " WHERE tenant_id = %s AND user_id = %s",
        owner.tenant_id,
        owner.user_id,
    )
    return row


async def test_a_run_inside_an_llm_call_holds_no_connection_and_a_second_run_is_refused(
    make_env, fake_llm
):
    # One pooled connection, a short pool timeout: a run holding it would starve the rest.
    env = await make_env(
        fake_llm.url, db={"pool_max": 1, "pool_timeout_s": 0.5}, cluster_similarity=0.35
    )
    await _hiker(env)
    await env.add(BOB, "The user likes green tea", type="preference")
    fake_llm.set_mode("delay", 1.8)
    first = asyncio.create_task(env.job.run(ALICE))
    await _until_llm_called(fake_llm)
    assert not first.done()
    stats = env.pool.get_stats()
    assert stats["pool_size"] == 1 and stats.get("pool_available", 0) == 1
    open_xacts = await env.sql(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
    )
    assert open_xacts == [{"n": 0}]  # no transaction left open across the LLM call
    # The lease is visible and live; a second run of the same user is refused.
    held = await _state(env, ALICE)
    assert held["claim_token"] is not None and held["last_run_at"] is None
    second = await env.job.run(ALICE)
    assert second["skipped"] == "another run in progress"
    assert env.job.metrics.counts["busy"] == 1
    assert await run_due(env.job, min_interval_s=0, limit=10) == 1  # Bob only: Alice is held
    # Another user's run gets the one connection meanwhile (else: PoolTimeout after 0.5 s).
    assert "skipped" not in await env.job.run(BOB)
    report = await first
    assert "skipped" not in report and report["insights"] == 1
    done = await _state(env, ALICE)
    assert done["claim_token"] is None and done["claimed_until"] is None  # released
    assert done["last_run_at"] is not None


async def test_a_crashed_runs_lease_is_taken_over_once_it_expires(make_env):
    env = await make_env(None, lease_s=60)
    await env.add(ALICE, "The user's favourite colour is blue", days_ago=2)
    await env.add(ALICE, "the user's favourite colour is blue.", days_ago=1)
    crashed = await Lease.claim(env.pool, ALICE, 60)  # a replica that died holding it
    assert crashed is not None
    assert await Lease.claim(env.pool, ALICE, 60) is None
    assert (await env.job.run(ALICE))["skipped"] == "another run in progress"
    assert await run_due(env.job, min_interval_s=0, limit=10) == 0
    await env.sql(
        "UPDATE consolidation_state SET claimed_until = now() - interval '1 second'"
    )  # its lease runs out
    report = await env.job.run(ALICE)
    assert "skipped" not in report and report["merged"] == 1
    # The crashed replica, back, can neither renew nor write under its old token.
    with pytest.raises(LeaseLost):
        await crashed.renew()
    with pytest.raises(LeaseLost):
        async with crashed.hold():
            pytest.fail("a lost lease must not yield a connection")
    await crashed.release()  # a no-op: the lease is not its own any more
    assert len(await env.active("alice")) == 1


async def test_a_run_that_lost_its_lease_during_the_llm_call_writes_nothing(make_env, fake_llm):
    env = await make_env(fake_llm.url, lease_s=0.4, cluster_similarity=0.35)
    await _hiker(env)
    fake_llm.set_mode("delay", 1.6)
    slow = asyncio.create_task(env.job.run(ALICE))  # its lease runs out inside the call
    await _until_llm_called(fake_llm)
    await asyncio.sleep(0.8)
    other = Consolidator(env.pool, env.slug, env.embed, env.job.llm, env.job.s)
    taker = asyncio.create_task(other.run(ALICE))  # another replica takes the user over
    lost = await slow
    assert lost["skipped"] == "lease lost to another run" and lost["insights"] == 0
    assert env.job.metrics.counts["lease_lost"] == 1
    won = await taker
    assert "skipped" not in won and won["insights"] == 1
    insights = [m for m in await env.active("alice") if m["type"] == "insight"]
    assert len(insights) == 1  # the slow run's answer was never written
    assert len(fake_llm.calls("insight")) == 2


async def test_a_forget_during_the_llm_call_revokes_the_lease_and_the_run_writes_nothing(
    make_env, fake_llm
):
    env = await make_env(fake_llm.url, cluster_similarity=0.35)
    await _hiker(env)
    fake_llm.set_mode("delay", 1.2)
    run = asyncio.create_task(env.job.run(ALICE))
    await _until_llm_called(fake_llm)  # the run holds the lease and waits for its insight
    counts = await ForgetStore(env.pool, env.slug).forget(Scope("t1", "alice"))
    assert counts["memories"] == 3
    assert (await _state(env, ALICE))["claim_token"] is None  # revoked by the forget
    report = await run
    assert report["skipped"] == "lease lost to another run" and report["insights"] == 0
    # Nothing built from the forgotten memories appeared after the forget answered.
    assert await env.sql("SELECT content FROM memory_items WHERE user_id = 'alice'") == []


async def test_a_run_claiming_while_a_forget_of_the_user_runs_writes_nothing(make_env, fake_llm):
    env = await make_env(fake_llm.url, cluster_similarity=0.35)
    await _hiker(env)
    async with env.pool.connection() as conn:  # a forget of one session of alice, running
        forget = await Erasure.start(conn, "t1", "alice", session_id="s9", lease_s=60)
    report = await env.job.run(ALICE)  # claims after the forget revoked the old lease
    assert report["skipped"] == "lease lost to another run" and report["insights"] == 0
    assert [m for m in await env.active("alice") if m["type"] == "insight"] == []
    async with env.pool.connection() as conn:
        await forget.finish(conn)
    report = await env.job.run(ALICE)  # claimed after the forget finished: writes again
    assert "skipped" not in report and report["insights"] == 1
