"""LLM spend per purpose equals what the LLM served: two Extractor replicas, one killed.

One Serve app: the Extractor with ``num_replicas=2`` (and its Embedder) against the
scripted LLM, which logs every call it served with its usage and the Ray replica
that made it (the caller's socket, looked up in the replicas' processes while the
connection is open). Turns of several tenants and end users (extraction with
reconcile, an ``infer`` job, episodic summaries) are spread over both replicas; then
the replica holding a slow extraction call is killed (``ray.kill``) with the call in
flight. The provider still serves (bills) it; the replica never sees the answer.

What the kill shows: the call's intent row was written before the request left, so
once it is stale a live replica's reconciler closes it as ``lost`` (no test hook:
``spend.reconcile_interval_s``). Calls and prompt tokens then equal what the LLM
served exactly; completion tokens too, except the lost call's, which is counted at
its reservation (its ``max_tokens``): an upper bound, exceeding the billed figure
by ``max_tokens`` minus the answer's length, for that call only. The answer never
reached memserve, so nothing better can be known. With ``usage`` omitted, every call
is counted by the tokenizer estimate and marked so.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psutil
import psycopg
import pytest

from serve_app.store.llm_spend import SpendStore
from serve_app.store.turns import INFER_PREFIX, SessionKey
from serve_app.testing.llm_server import FakeLLM, extraction, memory
from tests.deployments.extractor_app import extractor_db, serve_extractor

APP = "extractor-spend"
DEPLOYMENT = "ExtractorSpend"
LEASE_S = 5.0  # short, so the killed replica's claim runs out soon
ROUNDS = 5  # of sessions, until both replicas have served some
HOLD_S = 4.0  # the victim's call is answered this long after it arrives
STALE_S = 7.0  # > HOLD_S: an intent is not "lost" while its call is in flight
INFER_MARK = "remember-this-note"  # the infer job's turn (its served calls: purpose infer)
PURPOSES = ("extract", "infer", "summarize")
FIELDS = ("calls", "prompt_tokens", "completion_tokens")


@pytest.fixture(scope="module")
def db(pg_admin_dsn):
    with extractor_db(pg_admin_dsn, "t_extspend") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def extractor(ray_session, db, llm):
    env = {
        "MEMSERVE_LLM_TIMEOUT_S": "30",  # the held answer is not a timeout
        "MEMSERVE_EXTRACT_SCAN_INTERVAL_S": "0.5",
        "MEMSERVE_EXTRACT_LEASE_S": str(LEASE_S),
        "MEMSERVE_CONSOLIDATE_INTERVAL_S": "0",
        "MEMSERVE_COMPRESS_EVERY_M_TURNS": "3",  # a 4-turn session gets one summary
        "MEMSERVE_COMPRESS_KEEP_WINDOW": "1",
        "MEMSERVE_SPEND_INTENT_STALE_S": str(STALE_S),
        "MEMSERVE_SPEND_RECONCILE_INTERVAL_S": "1",
    }
    with serve_extractor(
        APP, DEPLOYMENT, "EmbedderForSpend", db=db, llm_url=llm.url, env=env, replicas=2
    ) as handle:
        yield handle


def live_replicas() -> dict[int, str]:
    """pid -> actor name of the live Extractor replicas (Ray's actor table)."""
    from ray._private import state

    return {
        a["Pid"]: a["Name"]
        for a in state.actors().values()
        if a["State"] == "ALIVE" and f"{APP}#{DEPLOYMENT}#" in a["Name"]
    }


class ReplicaOf:
    """The scripted LLM's ``identify``: which replica's process holds the caller's socket.

    ``pids`` is replaced (from the test's thread) as replicas come and go."""

    def __init__(self) -> None:
        self.pids: dict[int, str] = {}

    def __call__(self, peer: tuple[str, int]) -> str | None:
        for pid, name in list(self.pids.items()):
            with contextlib.suppress(psutil.Error):
                conns = psutil.Process(pid).net_connections(kind="tcp")
                if any(c.laddr and tuple(c.laddr[:2]) == tuple(peer) for c in conns):
                    return name
        return None


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := fn():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def purpose_of(call: dict[str, Any]) -> str:
    if call["kind"] == "summary":
        return "summarize"
    text = "\n".join(str(m.get("content", "")) for m in call["messages"])
    assert call["kind"] == "extract", call["kind"]
    return "infer" if INFER_MARK in text else "extract"


def served_by_purpose(llm: FakeLLM) -> dict[str, Counter]:
    """What the LLM answered (and a provider bills), per purpose, as its usage says."""
    out: dict[str, Counter] = {p: Counter() for p in PURPOSES}
    for call in llm.calls():
        if call.get("usage"):
            u = call["usage"]
            out[purpose_of(call)].update(
                calls=1, prompt_tokens=u["prompt_tokens"], completion_tokens=u["completion_tokens"]
            )
    return out


def state(db: str, tenants: tuple[str, ...]) -> dict[str, int]:
    """Pending and dead turns, open LLM-call intents and lost calls of ``tenants``."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM session_turns WHERE tenant_id = ANY(%(t)s)"
            "        AND extracted_at IS NULL),"
            " (SELECT count(*) FROM session_turns WHERE tenant_id = ANY(%(t)s)"
            "        AND dead_at IS NOT NULL),"
            " (SELECT count(*) FROM llm_calls WHERE tenant_id = ANY(%(t)s)"
            "        AND finished_at IS NULL),"
            " (SELECT count(*) FROM llm_calls WHERE tenant_id = ANY(%(t)s)"
            "        AND outcome = 'lost')",
            {"t": list(tenants)},
        ).fetchone()
    return dict(zip(("pending", "dead", "open", "lost"), row, strict=True))


async def say(turns, key: SessionKey, text: str, n: int = 4) -> None:
    lines = [("user" if i % 2 == 0 else "assistant", f"{text} (turn {i})") for i in range(n)]
    await turns.append(key, lines, agent_id=None, ttl_hours=1)


@pytest.mark.parametrize("reported", [True, False], ids=["usage", "estimated"])
async def test_spend_equals_served_across_two_replicas_and_a_kill(
    extractor, llm, turns, db, reported
):
    import ray

    owners = ReplicaOf()
    owners.pids = wait_for(lambda: len(r := live_replicas()) == 2 and r, 90, "two replicas")
    llm.reset()
    llm.set_usage(reported)
    llm.identify = owners
    llm.add_rule("violin", extraction([memory("The user plays the violin")]))
    llm.add_rule("oboe", extraction([memory("The user plays the oboe in a quintet")]))
    run = "u" if reported else "e"
    tenants = (f"spend-{run}-a", f"spend-{run}-b")
    infer = SessionKey(tenants[0], "u0", f"{INFER_PREFIX}job1")
    await turns.append(
        infer,
        [("user", f"{INFER_MARK}: I play the violin on Sundays")],
        agent_id=None,
        ttl_hours=1,
        meta={"session_id": "s0-0"},
    )

    def settled(summaries: int):
        s = state(db, tenants)
        done = len(llm.calls("summary")) >= summaries and not s["pending"] and not s["open"]
        return done and s

    keys: list[SessionKey] = []
    # Which replica takes a session is Ray's choice (and the scan's): rounds of sessions,
    # sent at once, until both replicas have called the LLM (a replica that has just
    # replaced a killed one can take a while to be routed to).
    for wave in range(ROUNDS):
        batch = [
            SessionKey(t, f"u{i}", f"s{wave}-{j}")
            for t in tenants
            for i in range(2)
            for j in range(2)
        ]
        for k in batch:
            await say(turns, k, f"I play the violin, says {k.user_id} in {k.session_id}")
        keys += batch
        sent = [*batch, infer] if wave == 0 else batch
        accepted = await asyncio.gather(*(extractor.process.remote(*k.as_tuple()) for k in sent))
        assert accepted == ["accepted"] * len(sent)
        await asyncio.to_thread(wait_for, partial(settled, len(keys)), 60, "the turns")
        workers = Counter(c["client"] for c in llm.calls())
        if set(workers) == set(owners.pids.values()):
            break
    assert set(workers) == set(owners.pids.values()), workers  # both replicas called the LLM

    # The kill: one extraction call is held; its replica is killed with it in flight.
    held = threading.Event()

    def hold(kind: str, messages: list[dict[str, Any]]) -> None:
        if kind == "extract" and "oboe" in messages[-1]["content"] and not held.is_set():
            held.set()
            time.sleep(HOLD_S)

    llm.on_request = hold
    victim_key = SessionKey(tenants[1], "u9", "kill")
    await say(turns, victim_key, "I play the oboe in a quintet")
    assert await extractor.process.remote(*victim_key.as_tuple()) == "accepted"
    await asyncio.to_thread(wait_for, held.is_set, 30, "the held extraction call")
    [victim_call] = [c for c in llm.calls("extract") if "oboe" in c["messages"][-1]["content"]]
    victim = victim_call["client"]
    assert victim in owners.pids.values(), victim
    assert state(db, tenants)["open"] == 1  # its intent was written before the request left
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    killed_at = time.monotonic()

    def replaced():
        now = live_replicas()
        return len(now) == 2 and victim not in now.values() and now

    owners.pids = await asyncio.to_thread(wait_for, replaced, 60, "a replica in its place")
    final = await asyncio.to_thread(wait_for, lambda: settled(len(keys) + 1), 60, "recovery")
    recovered_s = time.monotonic() - killed_at
    assert final == {"pending": 0, "dead": 0, "open": 0, "lost": 1}, final
    assert recovered_s >= STALE_S - 1.0  # the lost intent closed only once stale
    oboe = [c for c in llm.calls("extract") if "oboe" in c["messages"][-1]["content"]]
    assert len(oboe) >= 2 and oboe[0]["usage"], "the killed call was served; a replica redid it"

    # Metered per purpose (the store query behind GET /v1/admin/usage) vs served.
    store = SpendStore(turns.pool)
    today = datetime.now(UTC).date()
    metered: dict[str, Counter] = {p: Counter() for p in PURPOSES}
    estimated = Counter()
    for t in tenants:
        for row in await store.report(t, ["purpose"], today, today, limit=100):
            metered[row["purpose"]].update({f: row[f] for f in FIELDS})
            estimated[row["purpose"]] += row["estimated_calls"]
    with psycopg.connect(db) as conn:
        lost = conn.execute(
            "SELECT tenant_id, user_id, purpose, prompt_tokens, completion_tokens,"
            " reserved - est_prompt FROM llm_calls WHERE outcome = 'lost'"
            " AND tenant_id = ANY(%s)",
            (list(tenants),),
        ).fetchall()
    [(tenant, user, purpose, prompt, completion, cap)] = lost
    assert (tenant, user, purpose) == (tenants[1], "u9", "extract")
    billed = victim_call["usage"]
    assert prompt == billed["prompt_tokens"]
    assert completion == cap >= billed["completion_tokens"]  # counted at its max_tokens
    served = served_by_purpose(llm)
    expected = {p: Counter(served[p]) for p in PURPOSES}
    expected["extract"]["completion_tokens"] += cap - billed["completion_tokens"]
    assert all(served[p]["calls"] for p in PURPOSES), served
    for p in PURPOSES:
        assert {f: metered[p][f] for f in FIELDS} == {f: expected[p][f] for f in FIELDS}, p
    # usage reported: only the lost call is an estimate; omitted: every call is.
    assert estimated == (
        Counter(extract=1) if reported else Counter({p: served[p]["calls"] for p in PURPOSES})
    )
    per_replica = Counter(c["client"] for c in llm.calls())
    print(
        f"\n[{run}] served per purpose { {p: dict(served[p]) for p in PURPOSES} };"
        f" calls per replica {dict(per_replica)}; lost call: prompt {prompt}, billed"
        f" completion {billed['completion_tokens']}, counted {cap};"
        f" recovered in {recovered_s:.1f}s"
    )
    with psycopg.connect(db) as conn:
        oboes = conn.execute(
            "SELECT count(*) FROM memory_items WHERE tenant_id = %s AND user_id = 'u9'"
            " AND status = 'active' AND content LIKE '%%oboe%%' AND type <> 'episodic'",
            (tenants[1],),
        ).fetchone()[0]
    assert oboes == 1  # extracted once, by the replica that redid the call
