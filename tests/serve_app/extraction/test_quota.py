"""Extraction writes through the GuardedWriter: a full memory or fact quota holds for
LLM extraction, infer: true jobs and raw turns without an LLM (skipped and counted)."""

from __future__ import annotations

from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.store import NewMemory
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

FULL = {"max_memories_per_user": 1, "max_facts_per_user": 1}


async def fill(h, key: SessionKey) -> None:
    """The user's one allowed memory, written before extraction runs."""
    vec = await h.pipeline.embed(["The user owns a bicycle"], is_query=False)
    await h.pipeline.guarded.add(key.owner, [NewMemory("The user owns a bicycle")], vec)


async def test_llm_extraction_respects_full_memory_and_fact_quotas(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url).with_(quota=FULL))
    k = SessionKey("t1", "quinn", "s1")
    await fill(h, k)
    fake_llm.enqueue(
        extraction(
            [memory("The user is a vegetarian", "preference", 0.9, 0.95)],
            [fact("identity", "name", "Quinn", 1.0), fact("preference", "diet", "vegetarian")],
        )
    )
    await h.say(k, ("user", "I'm Quinn and I'm a vegetarian"), ("assistant", "Noted!"))
    out = await h.pipeline.process_session(k)
    assert out.error is None and out.saved == 0 and out.skipped == 1
    assert out.facts == {"added": 1, "over_quota": 1}
    assert [m["content"] for m in await h.memories("quinn")] == ["The user owns a bicycle"]
    assert len(await h.pipeline.facts.list(k.owner)) == 1
    assert h.pipeline.metrics.counts["memories_over_quota"] == 1
    assert h.pipeline.metrics.counts["facts_over_quota"] == 1
    assert await h.turns.pending_count(k) == 0  # done, not retried for ever


async def test_infer_jobs_respect_a_full_quota(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url).with_(quota=FULL))
    k = SessionKey("t1", "rae", INFER_PREFIX + "x1")
    await fill(h, k)
    fake_llm.enqueue(extraction([memory("The user is allergic to peanuts", "fact", 0.9)]))
    await h.say(k, ("user", "I am allergic to peanuts"), meta={"session_id": "chat-1"})
    await h.turns.end(k)
    out = await h.pipeline.process_session(k)
    assert out.saved == 0 and out.skipped == 1
    assert len(await h.memories("rae")) == 1


async def test_raw_turns_without_an_llm_respect_a_full_quota(make_harness):
    h = await make_harness(settings_for(None).with_(quota=FULL))
    k = SessionKey("t1", "sam", "s1")
    await fill(h, k)
    await h.say(k, ("user", "My dentist appointment is on Friday"), ("assistant", "Noted."))
    out = await h.pipeline.process_session(k)
    assert out.saved == 0 and out.skipped == 1 and out.turns_extracted == 2
    assert len(await h.memories("sam")) == 1
    assert h.pipeline.metrics.counts["memories_over_quota"] == 1
