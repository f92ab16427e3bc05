"""The extraction pipeline on a real database, the real encoder and the scripted LLM."""

from __future__ import annotations

import asyncio

from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.extraction.scheduler import SessionScheduler
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
from serve_app.text import wrap_context
from tests.serve_app.extraction.conftest import test_settings as settings_for

T = "t1"


def key(user: str, session: str = "s1") -> SessionKey:
    return SessionKey(T, user, session)


async def test_normal_extraction_stores_memories_and_facts(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    fake_llm.add_rule(
        "I'm Alex",
        extraction(
            [
                memory(
                    "The user's name is Alex and they prefer Python for data work",
                    "preference",
                    0.8,
                    0.95,
                ),
                memory("small talk", "fact", 0.1, 0.9),
            ],  # below min importance
            [fact("identity", "name", "Alex", 1.0), fact("preference", "language", "Python")],
        ),
    )
    k = key("alice")
    await h.say(
        k,
        ("user", "Hi, I'm Alex and I prefer Python for data work"),
        ("assistant", "Nice to meet you!"),
    )
    out = await h.pipeline.process_session(k)
    assert out.saved == 1 and out.skipped == 1 and out.error is None
    assert out.facts == {"added": 2}
    [m] = await h.memories("alice")
    assert m["type"] == "preference" and m["source"] == "extraction"
    assert m["metadata"]["extracted_from"] == {"session_id": "s1", "turns": [1, 2]}
    facts = await h.pipeline.facts.list(k.owner)
    assert {(f["key"], f["value"]) for f in facts} == {("name", "Alex"), ("language", "Python")}
    assert await h.turns.pending_count(k) == 0
    assert h.pipeline.metrics.counts["successes"] == 1
    # Another user's data is untouched.
    assert await h.memories("bob") == []


async def test_duplicate_fact_told_five_times_yields_one_memory(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    variants = [
        "The user's favourite colour is blue",
        "the user's favourite colour is BLUE.",  # same after normalisation
        "The user's favourite colour is blue",
        "Blue is the user's favourite colour",  # paraphrase: merged by similarity
        "The user's favourite colour is blue!",
    ]
    for i, text in enumerate(variants):
        fake_llm.enqueue(extraction([memory(text, "preference")]))
        k = key("carol", f"s{i}")
        await h.say(k, ("user", f"By the way, my favourite colour is blue ({i})"))
        out = await h.pipeline.process_session(k)
        assert out.error is None
    rows = await h.memories("carol")
    assert len(rows) == 1
    history = await h.pipeline.store.history(k.owner, rows[0]["id"], 1000)
    assert [e["event"] for e in history][0] == "ADD"
    assert "MERGE" in [e["event"] for e in history]
    assert h.pipeline.metrics.counts["memories_saved"] == 1


async def test_contradiction_keeps_confident_value_with_history(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = key("dave")
    script = [
        ("My name is Alex", fact("identity", "name", "Alex", 0.9)),
        ("Call me Sam", fact("identity", "name", "Sam", 0.95)),
        ("Maybe Al?", fact("identity", "name", "Al", 0.5)),  # less sure: ignored
    ]
    outcomes = []
    for text, f in script:
        fake_llm.enqueue(extraction(facts=[f]))
        await h.say(k, ("user", text))
        outcomes.append((await h.pipeline.process_session(k)).facts)
    assert outcomes == [{"added": 1}, {"replaced": 1}, {"ignored": 1}]
    active = await h.pipeline.facts.list(k.owner)
    assert [(f["key"], f["value"], f["active"]) for f in active] == [("name", "Sam", True)]
    history = await h.pipeline.facts.list(k.owner, include_inactive=True)
    assert [(f["value"], f["active"]) for f in history] == [("Alex", False), ("Sam", True)]
    assert history[0]["superseded_by"] == history[1]["id"]
    assert history[0]["superseded_at"] is not None


async def test_malformed_json_is_retried_then_dead_lettered(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url, max_attempts=2))
    k = key("erin")
    await h.say(k, ("user", "I have two kids"))
    fake_llm.set_mode("malformed")
    out = await h.pipeline.process_session(k)
    assert out.error == "bad_output"
    assert await h.turns.pending_count(k) == 1  # kept for a retry
    # Counted as an answer that broke its contract, under the format it was asked in.
    assert h.pipeline.metrics.counts["schema_failures:extract"] == 1
    [call] = fake_llm.calls("extract")
    assert call["body"]["response_format"]["json_schema"]["name"] == "memserve_extraction"
    out = await h.pipeline.process_session(k)
    assert out.error == "bad_output"
    assert await h.turns.pending_count(k) == 0  # dead-lettered, not retried forever
    [row] = await h.rows("SELECT extract_error, extract_attempts FROM session_turns")
    assert row["extract_error"].startswith("bad_output") and row["extract_attempts"] == 2
    assert await h.memories("erin") == []
    # The pipeline keeps working once answers are valid again.
    fake_llm.set_mode("ok")
    fake_llm.enqueue(extraction([memory("The user has two kids")]))
    await h.say(k, ("user", "Two kids, yes"))
    assert (await h.pipeline.process_session(k)).saved == 1


async def test_timeout_counts_an_attempt_and_500_leaves_turns_queued(make_harness, fake_llm):
    h = await make_harness(
        settings_for(fake_llm.url, llm={"timeout_s": 0.3, "breaker_failures": 10})
    )
    k = key("frank")
    await h.say(k, ("user", "I am vegetarian"))
    fake_llm.set_mode("delay", delay_s=1.0)
    assert (await h.pipeline.process_session(k)).error == "timeout"
    fake_llm.set_mode("http500")
    assert (await h.pipeline.process_session(k)).error == "http_5xx"
    assert await h.turns.pending_count(k) == 1
    [row] = await h.rows("SELECT claimed_until, extract_attempts FROM session_turns")
    # The timeout may be the batch's fault (too big): counted; a 500 is an outage: not.
    assert row["claimed_until"] is None and row["extract_attempts"] == 1
    fake_llm.set_mode("ok")
    fake_llm.add_rule("vegetarian", extraction(facts=[fact("constraint", "diet", "vegetarian")]))
    out = await h.pipeline.process_session(k)
    assert out.facts == {"added": 1} and await h.turns.pending_count(k) == 0
    counts = h.pipeline.metrics.counts
    assert counts["error:timeout"] == 1 and counts["error:http_5xx"] == 1


async def test_llm_down_then_back_loses_no_turn(make_harness, fake_llm):
    s = settings_for(fake_llm.url, every_n_turns=1, llm={"breaker_reset_s": 0.3})
    h = await make_harness(s)
    sched = SessionScheduler(h.pipeline, concurrency=4)
    fake_llm.down()
    users = [f"g{i}" for i in range(5)]
    for u in users:
        fake_llm.add_rule(f"token-{u}", extraction([memory(f"The user {u} keeps a token-{u}")]))
        await h.say(key(u), ("user", f"remember my token-{u}"))
        sched.submit(key(u))
    await sched.drain()
    assert await h.turns.pending_count() == 5
    assert h.pipeline.llm.breaker.state != "closed"
    fake_llm.up()
    await asyncio.sleep(0.35)  # breaker lets a trial call through
    for _ in range(20):  # the periodic scan, run by hand
        await sched.scan_once()
        await sched.drain()
        if await h.turns.pending_count() == 0:
            break
        await asyncio.sleep(0.35)
    assert await h.turns.pending_count() == 0
    for u in users:
        [m] = await h.memories(u)
        assert f"token-{u}" in m["content"]


async def test_junk_never_reaches_extraction(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = key("gina")
    # An existing memory the assistant will restate.
    fake_llm.enqueue(extraction([memory("The user lives in Lisbon with two cats")]))
    await h.say(k, ("user", "I live in Lisbon with my two cats"))
    await h.pipeline.process_session(k)
    fake_llm.reset()
    await h.say(
        k,
        ("system", "You are a helpful assistant. SYSTEM-SECRET"),
        ("user", wrap_context("- The user lives in Lisbon with two cats") + " Any plans idea?"),
        (
            "assistant",
            "Since you live in Lisbon with your two cats, stay local. "
            "How about a picnic in Monsanto park?",
        ),
        ("user", "Sounds good, I start a new job at Acme on Monday"),
    )
    out = await h.pipeline.process_session(k)
    assert out.junk_dropped >= 3
    [call] = fake_llm.calls("extract")
    prompt = call["messages"][1]["content"]
    assert "SYSTEM-SECRET" not in prompt
    assert "memserve-context" not in prompt
    assert "live in Lisbon" not in prompt  # the restatement is gone
    assert "picnic in Monsanto" in prompt and "new job at Acme" in prompt
    # Only junk left: no LLM call at all, and the turns are done.
    fake_llm.reset()
    await h.say(k, ("system", "rules"), ("user", wrap_context("memories only")))
    await h.pipeline.process_session(k)
    assert fake_llm.calls() == [] and await h.turns.pending_count(k) == 0


async def test_without_llm_turns_become_searchable_episodic_memories(make_harness):
    h = await make_harness(settings_for(None))
    assert not h.pipeline.enabled
    k = key("hank")
    said = "My dentist appointment is on Friday"
    await h.say(k, ("system", "prompt"), ("user", said), ("assistant", "Noted."), ("user", said))
    out = await h.pipeline.process_session(k)
    rows = await h.memories("hank")
    assert [(r["type"], r["source"], r["content"]) for r in rows] == [
        ("episodic", "turn", "My dentist appointment is on Friday")
    ]
    assert out.turns_extracted == 4 and await h.turns.pending_count(k) == 0
    vec = await h.pipeline.embed(["when is the dentist?"], is_query=True)
    [best] = await h.pipeline.index.nearest(k.owner, vec[0], 1)
    assert best.content == "My dentist appointment is on Friday" and best.similarity > 0.5
    assert await h.pipeline.facts.list(k.owner) == []  # no fake extraction
    # Ended and all extracted: no summary is owed without an LLM, so the scan does not
    # list it again and again.
    await h.turns.end(k)
    assert k not in await h.pipeline.scan()


async def test_episodic_compression_every_m_turns_and_on_end(make_harness, fake_llm):
    h = await make_harness(
        settings_for(fake_llm.url, compress_every_m_turns=6, compress_keep_window=2)
    )
    k = key("ivy")
    fake_llm.add_rule(
        "Turns 1-4", '{"summary": "The user planned a trip to Kyoto in May."}', kind="summary"
    )
    for i in range(3):
        await h.say(k, ("user", f"Kyoto question {i}"), ("assistant", f"Kyoto answer {i}"))
    await h.pipeline.process_session(k)
    [summary] = await h.memories("ivy", "summary")
    assert summary["type"] == "episodic"
    assert summary["content"] == "The user planned a trip to Kyoto in May."
    assert summary["metadata"] == {"session_id": "s1", "turn_start": 1, "turn_end": 4}
    left = await h.turns.uncompressed(k)
    assert [r["turn_index"] for r in left] == [5, 6]
    # Session end: the rest is summarised too.
    await h.turns.end(k)
    out = await h.pipeline.process_session(k)
    assert out.summaries == 1
    assert await h.turns.uncompressed(k) == []
    metas = [m["metadata"] for m in await h.memories("ivy", "summary")]
    assert metas[1]["turn_start"] == 5 and metas[1]["turn_end"] == 6


async def test_infer_session_uses_callers_session_and_tags(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    k = key("jill", INFER_PREFIX + "abc")
    fake_llm.enqueue(extraction([memory("The user is allergic to peanuts", "fact", 0.9)]))
    await h.say(
        k,
        ("user", "I am allergic to peanuts"),
        meta={"session_id": "chat-7", "tags": ["health"], "metadata": {"src": "x"}},
    )
    await h.turns.end(k)
    out = await h.pipeline.process_session(k)
    assert out.saved == 1 and out.summaries == 0
    [m] = await h.memories("jill")
    assert m["session_id"] == "chat-7" and m["tags"] == ["health"]
    assert m["metadata"]["src"] == "x"


async def test_scheduler_runs_again_for_triggers_during_a_run(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    fake_llm.set_mode("delay", delay_s=0.3)
    sched = SessionScheduler(h.pipeline, concurrency=2)
    k = key("kim")
    await h.say(k, ("user", "first"))
    sched.submit(k)
    await asyncio.sleep(0.1)
    await h.say(k, ("user", "second"))  # arrives while the first run waits on the LLM
    sched.submit(k)
    await sched.drain()
    assert await h.turns.pending_count(k) == 0
    assert len(fake_llm.calls("extract")) == 2


async def test_concurrent_appends_get_distinct_turn_indexes(make_harness):
    h = await make_harness(settings_for(None))
    k = key("lena")
    await asyncio.gather(*(h.say(k, ("user", f"m{i}"), ("assistant", "ok")) for i in range(8)))
    rows = await h.rows("SELECT turn_index FROM session_turns ORDER BY turn_index")
    assert [r["turn_index"] for r in rows] == list(range(1, 17))
