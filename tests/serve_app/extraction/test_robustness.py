"""Extraction that cannot be jammed: counted failures, dead letters, token caps, claims,
sanitised values and the per-owner lock (real Postgres, real encoder, scripted LLM)."""

from __future__ import annotations

import asyncio
import json

import pytest

from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.extraction.prompts import chunk_turns, truncate_tokens
from serve_app.extraction.turn import Turn
from serve_app.store.memory_index import VersionConflict
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
from serve_app.text import count_tokens
from tests.serve_app.extraction.conftest import test_settings as settings_for

T = "t1"


def key(user: str, session: str = "s1", tenant: str = T) -> SessionKey:
    return SessionKey(tenant, user, session)


async def test_refused_batch_counts_attempts_then_dead_letters_and_breaker_stays_closed(
    make_harness, fake_llm
):
    h = await make_harness(settings_for(fake_llm.url, max_attempts=3, llm={"breaker_failures": 2}))
    fake_llm.add_rule("forbidden-topic", "", status=400)
    k = key("poison")
    await h.say(k, ("user", "tell me about forbidden-topic"))
    for attempt in range(1, 4):
        out = await h.pipeline.process_session(k)
        assert out.error == "http_4xx"
        [row] = await h.rows("SELECT extract_attempts, dead_at FROM session_turns")
        assert row["extract_attempts"] == attempt
        assert (row["dead_at"] is not None) == (attempt == 3)
    assert h.pipeline.llm.breaker.state == "closed"  # 4xx: the LLM itself is fine
    assert await h.turns.pending_count(k) == 0
    assert (await h.turns.status(k)).failed == 1
    # Ending the session does not feed the refused turn to the summary prompt either.
    await h.say(k, ("user", "an ordinary turn"), ("assistant", "ok"))
    await h.turns.end(k)
    fake_llm.add_rule("an ordinary turn", extraction([]))
    assert (await h.pipeline.process_session(k)).summaries == 0
    assert not [
        c for c in fake_llm.calls("summary") if "forbidden-topic" in json.dumps(c["messages"])
    ]
    [dead] = await h.turns.dead_letters(T)
    assert dead["session_id"] == "s1" and dead["error"].startswith("http_4xx")
    assert dead["attempts"] == 3 and dead["turns"] == 1
    # Dead letters are kept: the expiry purge leaves them alone.
    await h.rows("UPDATE session_turns SET expires_at = now() - interval '1 hour' RETURNING id")
    await h.pipeline.scan()
    assert len(await h.rows("SELECT id FROM session_turns")) == 1
    # An admin retry after the cause is fixed extracts them.
    fake_llm.reset()
    fake_llm.add_rule(
        "forbidden-topic", extraction([memory("The user asks about forbidden-topic")])
    )
    assert await h.turns.retry_dead(T, "poison") == [k]
    assert await h.turns.dead_letters(T) == []
    assert (await h.pipeline.process_session(k)).saved == 1


async def test_failed_batch_backs_off_and_scan_keeps_it_out(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url, retry_backoff_s=60.0, every_n_turns=1))
    fake_llm.set_mode("malformed")
    k = key("slow")
    await h.say(k, ("user", "hello there"))
    assert (await h.pipeline.process_session(k)).error == "bad_output"
    assert k not in await h.pipeline.scan()  # waits out its backoff
    assert await h.turns.claim_pending(k, 10, 60) == []
    [row] = await h.rows("SELECT retry_at > now() + interval '50 s' AS later FROM session_turns")
    assert row["later"]


async def test_database_error_while_saving_counts_an_attempt(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    fake_llm.enqueue(extraction(facts=[fact("identity", "name", "Zed")]))
    k = key("dbfail")
    await h.say(k, ("user", "I'm Zed"))
    async with h.pool.connection() as conn:  # facts cannot be written for a moment
        await conn.execute("ALTER TABLE facts ADD CONSTRAINT no_zed CHECK (value <> 'Zed')")
    out = await h.pipeline.process_session(k)
    assert out.error == "db_error"
    [row] = await h.rows("SELECT extract_attempts, claim_token FROM session_turns")
    assert row["extract_attempts"] == 1 and row["claim_token"] is None
    assert h.pipeline.metrics.counts["error:db_error"] == 1


async def test_an_answer_nested_1000_deep_dead_letters_instead_of_looping(make_harness, fake_llm):
    """CPython's JSON decoder raises RecursionError on ~1000 nested brackets; uncaught, the
    batch was never failed and went back to the LLM every lease period, for ever."""
    h = await make_harness(settings_for(fake_llm.url, max_attempts=2))
    fake_llm.add_rule("nesting", '{"memories": ' + "[" * 1200 + "]" * 1200 + "}")
    k = key("deep")
    await h.say(k, ("user", "a turn that gets the nesting answer"))
    for attempt in (1, 2):
        out = await h.pipeline.process_session(k)
        assert out.error == "bad_output"
        [row] = await h.rows("SELECT extract_attempts, dead_at, claim_token FROM session_turns")
        assert row["extract_attempts"] == attempt and row["claim_token"] is None
    assert row["dead_at"] is not None
    [dead] = await h.turns.dead_letters(T)
    assert "nested" in dead["error"]
    assert len(fake_llm.calls("extract")) == 2  # not re-sent once dead


async def test_an_unforeseen_error_counts_an_attempt_and_dead_letters(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url, max_attempts=1))
    fake_llm.enqueue(extraction([memory("The user plays the oboe")]))

    async def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in a later step")

    h.pipeline._save_memories = broken  # this pipeline object only, not a global
    k = key("bug")
    await h.say(k, ("user", "I play the oboe"))
    assert (await h.pipeline.process_session(k)).error == "internal"
    [row] = await h.rows("SELECT extract_attempts, dead_at FROM session_turns")
    assert row["extract_attempts"] == 1 and row["dead_at"] is not None
    assert h.pipeline.metrics.counts["error:internal"] == 1


async def test_long_batch_is_split_and_long_turns_truncated(make_harness, fake_llm):
    """40 turns of 8,000 characters: no prompt is ever too long for the model."""
    h = await make_harness(
        settings_for(fake_llm.url, max_prompt_tokens=3000, max_turn_tokens=1000, max_turns=40)
    )
    fake_llm.limit_prompt(3000 * 4 + 4000)  # the model's window: prompt + system prompt
    k = key("verbose")
    await h.say(k, *[("user", f"turn {i} " + "lorem ipsum dolor " * 450) for i in range(40)])
    out = await h.pipeline.process_session(k)
    assert out.error is None and out.turns_extracted == 40
    calls = fake_llm.calls("extract")
    assert len(calls) >= 13  # ~1000 tokens per turn, 3000 per prompt
    for c in calls:
        assert count_tokens(c["messages"][-1]["content"]) <= 3000


def test_chunking_keeps_order_and_respects_the_cap():
    turns = [Turn("user", "word " * (50 * i), i) for i in range(1, 30)]
    chunks = chunk_turns(turns, 500, 200)
    assert [t.turn_index for c in chunks for t in c] == list(range(1, 30))
    assert all(
        sum(count_tokens(f"[{t.turn_index}] user: {t.content}") for t in c) <= 500 for c in chunks
    )
    assert truncate_tokens("short", 10) == "short"
    cut = truncate_tokens("x " * 5000, 100)
    assert count_tokens(cut) <= 100 and cut.endswith("[...]")


async def test_nul_and_overlong_llm_values_are_sanitised(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    answer = {
        "memories": [
            {
                "type": "fact",
                "content": "The user\x00 plays chess" + "!" * 5000,
                "importance": 0.8,
                "confidence": 0.9,
                "tags": ["ga\x00me", "t" * 500],
            }
        ],
        "facts": [
            {
                "category": "preference",
                "key": "ga\x00me",
                "value": "ch\x00ess",
                "confidence": 0.9,
                "importance": 0.9,
            }
        ],
    }
    fake_llm.enqueue(json.dumps(answer))
    k = key("nul")
    await h.say(k, ("user", "I play chess"))
    out = await h.pipeline.process_session(k)
    assert out.error is None and out.saved == 1
    [m] = await h.memories("nul")
    assert "\x00" not in m["content"] and len(m["content"]) <= 2000
    assert m["tags"] == ["game", "t" * 64]
    [f] = await h.pipeline.facts.list(k.owner)
    assert (f["key"], f["value"], f["importance"]) == ("game", "chess", pytest.approx(0.9))


async def test_expired_claim_taken_over_is_not_finished_twice(make_harness):
    h = await make_harness(settings_for(None))
    k = key("claims")
    await h.say(k, ("user", "a"), ("user", "b"))
    first = await h.turns.claim_pending(k, 10, lease_s=0.05)
    await asyncio.sleep(0.1)  # the first holder stalls past its lease
    second = await h.turns.claim_pending(k, 10, lease_s=60)
    assert [r["id"] for r in second] == [r["id"] for r in first]
    ids = [r["id"] for r in first]
    assert await h.turns.mark_extracted(ids, claim=first[0]["claim_token"]) == 0
    assert await h.turns.release(ids, claim=first[0]["claim_token"], failed_attempt=True) == 0
    assert await h.turns.pending_count(k) == 2
    assert await h.turns.mark_extracted(ids, claim=second[0]["claim_token"]) == 2


async def test_concurrent_identical_infer_items_yield_one_memory(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    text = "The user's passport number ends in 4711"
    fake_llm.add_rule("passport", extraction([memory(text)]))
    keys = [key("twin", f"{INFER_PREFIX}{i}") for i in range(4)]
    for k in keys:
        await h.say(k, ("user", "my passport number ends in 4711"))
    outs = await asyncio.gather(*(h.pipeline.process_session(k, force=True) for k in keys))
    assert sum(o.saved for o in outs) == 1
    assert sum(o.skipped + o.merged for o in outs) == 3
    assert len(await h.memories("twin")) == 1


async def test_merge_never_overwrites_a_concurrent_patch(make_harness, fake_llm, encoder):
    h = await make_harness(settings_for(fake_llm.url))
    k = key("patchy")
    fake_llm.enqueue(extraction([memory("The user's favourite colour is blue", "preference")]))
    await h.say(k, ("user", "blue is my favourite colour"))
    await h.pipeline.process_session(k)
    [m] = await h.memories("patchy")
    assert m["version"] == 1
    patched = await h.pipeline.guarded.update(
        k.owner, m["id"], {"importance": 0.95}, None, expected_version=1
    )
    assert patched["version"] == 2
    with pytest.raises(VersionConflict):  # a writer that read version 1 loses
        await h.pipeline.guarded.update(
            k.owner, m["id"], {"content": "stale"}, None, expected_version=1
        )
    # The extractor's merge re-reads the version and keeps the PATCHed importance.
    fake_llm.enqueue(
        extraction([memory("Blue is the user's favourite colour", "preference", importance=0.6)])
    )
    await h.say(k, ("user", "blue, definitely"))
    out = await h.pipeline.process_session(k)
    assert out.merged == 1
    [m] = await h.memories("patchy")
    assert m["importance"] == pytest.approx(0.95) and m["version"] == 3
    assert m["content"] == "Blue is the user's favourite colour"
