"""Consolidation writes through the GuardedWriter: its run is erasure-guarded work from the
moment it reads the memories, and a full quota refuses its insights (counted, no row)."""

from __future__ import annotations

from serve_app.consolidation.job import Consolidator
from serve_app.store import Owner, erasure
from serve_app.store.guarded import GuardedWriter
from serve_app.store.quota import Quota

ALICE = Owner("t1", "alice")
HIKING = [
    "The user goes hiking every weekend",
    "The user bought new hiking boots",
    "The user plans a hiking trip to the Alps",
]


async def test_a_full_quota_refuses_the_insight_and_the_run_counts_it(make_env, fake_llm):
    env = await make_env(fake_llm.url, cluster_similarity=0.35)
    for text in HIKING:
        await env.add(ALICE, text, type="fact")
    full = GuardedWriter(env.pool, env.slug, memory_quota=Quota(per_user=len(HIKING)))
    job = Consolidator(env.pool, env.slug, env.embed, env.job.llm, env.job.s, writer=full)
    report = await job.run(ALICE)
    assert len(fake_llm.calls("insight")) == 1  # asked, then refused by the writer
    assert report["insights"] == 0 and report["refused"] == 1
    assert [m["type"] for m in await env.active("alice")] == ["fact"] * 3
    assert job.metrics.counts["refused"] == 1


async def test_the_run_is_erasure_guarded_work_of_its_owner(make_env, fake_llm):
    env = await make_env(fake_llm.url, cluster_similarity=0.35)
    for text in HIKING:
        await env.add(ALICE, text, type="fact")
    seen = []
    embed = env.job.embed

    async def watching(texts, *, is_query):
        seen.append(erasure.current())  # the insight's embedding, just before its write
        return await embed(texts, is_query=is_query)

    env.job.embed = watching
    report = await env.job.run(ALICE)
    assert report["insights"] == 1
    [work] = seen
    assert (work.tenant_id, work.user_id, work.session_id) == ("t1", "alice", "")
    assert erasure.current() is None  # cleared when the run ends
