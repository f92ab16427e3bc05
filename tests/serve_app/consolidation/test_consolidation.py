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
    pairs = near_pairs(v, 0.98, max_neighbours=4, block=2)
    assert set(pairs) == {(0, 1), (2, 3)}
    assert sorted(map(sorted, groups(5, pairs))) == [[0, 1], [2, 3]]


def test_identical_memories_give_bounded_pairs_and_still_one_group():
    """Every pair above the threshold was n^2/2 tuples for n near-identical memories
    (2000: 400 MB; the 20,000 a run loads: tens of GB); each item now brings its nearest."""
    rng = np.random.default_rng(7)
    v = np.repeat(rng.normal(size=(1, 64)), 3000, axis=0) + rng.normal(scale=1e-3, size=(3000, 64))
    v = np.vstack([v, rng.normal(size=(50, 64))])  # unrelated ones stay out
    pairs = near_pairs(v.astype(np.float32), 0.9, max_neighbours=8, block=512)
    assert 3000 <= len(pairs) <= 3000 * 8 and all(a < b < 3000 for a, b in pairs)
    assert [len(g) for g in groups(len(v), pairs)] == [3000]


def test_with_room_for_every_neighbour_the_pairs_are_all_pairs_above_the_threshold():
    rng = np.random.default_rng(3)
    v = np.repeat(rng.normal(size=(6, 16)), 40, axis=0) + rng.normal(scale=0.3, size=(240, 16))
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    sims = u @ u.T
    every = {(a, b) for a in range(240) for b in range(a + 1, 240) if sims[a, b] >= 0.8}
    assert near_pairs(v, 0.8, max_neighbours=239, block=64) == sorted(every)
    few = set(near_pairs(v, 0.8, max_neighbours=3, block=64))
    assert few < every and len(few) <= 240 * 3


async def test_the_pair_search_runs_off_the_event_loop(make_env, monkeypatch):
    """``POST /v1/admin/consolidate`` runs in the Ingress: numpy work on the loop made
    another user's search wait (6000 identical memories: 17 s)."""
    import asyncio

    import serve_app.consolidation.job as job

    on_loop: list[bool] = []

    def spy(*args, **kw):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return near_pairs(*args, **kw)

    monkeypatch.setattr(job, "near_pairs", spy)
    env = await make_env(None, merge_similarity=0.85)
    for i, text in enumerate(DUPES[:3]):
        await env.add(ALICE, text, days_ago=10 - i, type="preference")
    assert (await env.job.run(ALICE))["merged"] == 1
    assert on_loop == [False]


async def test_a_merge_group_is_bounded_per_run(make_env):
    env = await make_env(None, merge_similarity=0.85, max_merge_group=3)
    for i, text in enumerate(DUPES):
        await env.add(ALICE, text, days_ago=10 - i, type="preference")
    first = await env.job.run(ALICE)
    assert first["merged"] == 1 and first["archived"] == 2  # the newest three
    second = await env.job.run(ALICE)
    assert second["merged"] == 1 and second["archived"] == 2  # the survivor and the rest
    assert len(await env.active("alice")) == 1


async def test_five_duplicates_over_time_become_one_and_an_insight_keeps_its_sources(
    make_env, fake_llm
):
    env = await make_env(fake_llm.url, merge_similarity=0.85, cluster_similarity=0.35)
    for i, text in enumerate(DUPES):  # written weeks apart
        await env.add(
            ALICE,
            text,
            days_ago=7 * (len(DUPES) - i),
            type="preference",
            importance=0.3 + 0.1 * i,
            tags=[f"t{i}"],
        )
    hiking = [
        "The user goes hiking every weekend",
        "The user bought new hiking boots",
        "The user plans a hiking trip to the Alps",
    ]
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
    assert len(archived) == 4 and all(a["data"]["merged_into"] == str(blue["id"]) for a in archived)
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
    old = await env.add(ALICE, "The user once asked about tax forms", days_ago=90, importance=0.6)
    used = await env.add(ALICE, "The user drives a red bicycle", days_ago=90, importance=0.6)
    await env.sql(
        "UPDATE memory_items SET access_count = 3, last_accessed_at = now() WHERE id = %s",
        used["id"],
    )
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
    fake_llm.add_rule(
        "Lisbon", json.dumps({"summary": "The user travelled to Lisbon twice."}), kind="digest"
    )
    texts = [
        "The user booked a flight to Lisbon in March",
        "The user asked for fado bars near the Alfama",
        "The user compared hotel prices in central Lisbon",
    ]
    olds = [await env.add(ALICE, t, days_ago=60 + i, type="episodic") for i, t in enumerate(texts)]
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
