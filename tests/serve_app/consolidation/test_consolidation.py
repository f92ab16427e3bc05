"""Consolidation: merge near-duplicates written over time, insights with sources,
digests of old episodes, decay of unused importance; bounded and idempotent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from serve_app.consolidation.job import groups, near_pairs, run_due
from serve_app.store import Owner

ALICE = Owner("t1", "alice")
DUPES = [
    "The user's favourite colour is blue",
    "the user's favourite colour is blue.",
    "The user likes the colour blue most",
    "The user's favorite colour is blue",
    "Blue is the user's favourite colour",
]


def test_near_pairs_and_groups_find_components():
    v = np.array([[1, 0], [0.99, 0.1], [0, 1], [0.05, 1], [1, 1]], dtype=np.float32)
    pairs = near_pairs(v, 0.98, block=2)
    assert set(pairs) == {(0, 1), (2, 3)}
    assert sorted(map(sorted, groups(5, pairs))) == [[0, 1], [2, 3]]


async def test_five_duplicates_over_time_become_one_and_an_insight_keeps_its_sources(
    make_env, fake_llm
):
    env = await make_env(fake_llm.url, merge_similarity=0.85, cluster_similarity=0.35)
    for i, text in enumerate(DUPES):  # written weeks apart
        await env.add(ALICE, text, days_ago=7 * (len(DUPES) - i), type="preference",
                      importance=0.3 + 0.1 * i, tags=[f"t{i}"])  # fmt: skip
    hiking = ["The user goes hiking every weekend", "The user bought new hiking boots",
              "The user plans a hiking trip to the Alps"]  # fmt: skip
    for text in hiking:
        await env.add(ALICE, text, type="fact")
    other = await env.add(Owner("t1", "bob"), DUPES[0], type="preference")
    report = await env.job.run(ALICE)
    assert report["merged"] == 1 and report["archived"] == 4
    active = await env.active("alice")
    blues = [m for m in active if "blue" in m["content"].lower()]
    assert len(blues) == 1
    [blue] = blues
    assert blue["content"] == DUPES[-1]  # newest wording
    assert blue["importance"] == pytest.approx(0.7) and len(blue["tags"]) == 5
    assert len(blue["data"]["merged_from"]) == 4
    history = await env.sql("SELECT event FROM memory_history WHERE memory_id = %s", blue["id"])
    assert [h["event"] for h in history] == ["ADD", "MERGE"]
    archived = await env.sql("SELECT data FROM memory_items WHERE status = 'archived'")
    assert len(archived) == 4 and all(a["data"]["merged_into"] == str(blue["id"])
                                      for a in archived)  # fmt: skip
    [insight] = [m for m in active if m["type"] == "insight"]
    hiking_ids = {str(m["id"]) for m in active if m["content"] in hiking}
    assert set(insight["data"]["sources"]) == hiking_ids
    assert insight["source"] == "consolidation"
    # Bob's identical memory is his own: untouched.
    [bob] = await env.active("bob")
    assert bob["id"] == other["id"] and bob["version"] == 1
    # A second run changes nothing (idempotent) and asks the LLM nothing new.
    calls = len(fake_llm.calls("insight"))
    again = await env.job.run(ALICE)
    assert again["merged"] == again["insights"] == again["decayed"] == 0
    assert len(fake_llm.calls("insight")) == calls
    assert len(await env.active("alice")) == len(active)
    assert env.job.metrics.counts["merged"] == 1 and env.job.metrics.counts["insights"] == 1


async def test_without_llm_merge_and_decay_still_run(make_env):
    env = await make_env(None, merge_similarity=0.85)
    for i, text in enumerate(DUPES[:3]):
        await env.add(ALICE, text, days_ago=10 - i, type="preference")
    old = await env.add(ALICE, "The user once asked about tax forms", days_ago=90,
                        importance=0.6)  # fmt: skip
    used = await env.add(ALICE, "The user drives a red bicycle", days_ago=90, importance=0.6)
    await env.sql("UPDATE memory_items SET access_count = 3, last_accessed_at = now()"
                  " WHERE id = %s", used["id"])  # fmt: skip
    report = await env.job.run(ALICE)
    assert report["merged"] == 1 and report["insights"] == 0 and report["decayed"] == 1
    [row] = await env.sql("SELECT importance, version FROM memory_items WHERE id = %s", old["id"])
    assert row["importance"] == pytest.approx(0.54) and row["version"] == 2
    [row] = await env.sql("SELECT importance FROM memory_items WHERE id = %s", used["id"])
    assert row["importance"] == pytest.approx(0.6)
    assert (await env.job.run(ALICE))["decayed"] == 0  # once per period
    [state] = await env.sql("SELECT last_report FROM consolidation_state")
    assert state["last_report"]["decayed"] == 0


async def test_old_episodes_are_digested_with_sources(make_env, fake_llm):
    env = await make_env(fake_llm.url, episodic_age_days=30, digest_batch=10, min_cluster=99)
    fake_llm.add_rule("Lisbon", json.dumps({"summary": "The user travelled to Lisbon twice."}),
                      kind="digest")  # fmt: skip
    texts = ["The user booked a flight to Lisbon in March",
             "The user asked for fado bars near the Alfama",
             "The user compared hotel prices in central Lisbon"]  # fmt: skip
    olds = [await env.add(ALICE, t, days_ago=60 + i, type="episodic")
            for i, t in enumerate(texts)]  # fmt: skip
    recent = await env.add(ALICE, "The user talked about Lisbon today", type="episodic")
    report = await env.job.run(ALICE)
    assert report["digests"] == 1
    active = await env.active("alice")
    [digest] = [m for m in active if m["source"] == "consolidation"]
    assert digest["content"] == "The user travelled to Lisbon twice."
    assert set(digest["data"]["sources"]) == {str(o["id"]) for o in olds}
    assert {m["id"] for m in active} == {digest["id"], recent["id"]}


async def test_periodic_tick_runs_due_users_once(make_env):
    env = await make_env(None)
    await env.add(ALICE, "The user likes tea")
    await env.add(Owner("t2", "carl"), "The user likes coffee")
    assert await run_due(env.job, min_interval_s=3600, limit=10) == 2
    assert await run_due(env.job, min_interval_s=3600, limit=10) == 0
