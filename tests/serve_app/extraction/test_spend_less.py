"""Fewer tokens for the same memories (issue 31 item 4): the static part of the prompt
first, no call for a batch with nothing the user said worth one, ``max_tokens`` sized
from the batch (a cut answer is asked again at the cap). Real Postgres and encoder,
the scripted LLM."""

from __future__ import annotations

from serve_app.extraction.junk import substantive
from serve_app.extraction.prompts import EXTRACT_SYSTEM
from serve_app.extraction.reconcile import RECONCILE_RULES
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for


def test_acknowledgements_are_not_substantive():
    assert not any(map(substantive, ["ok thanks!", "Thank you.", "👍", "...", "OK", "lol"]))
    assert all(map(substantive, ["I moved to Berlin", "no, I live in Paris", "ok, 42"]))


async def test_a_batch_of_acknowledgements_costs_no_call(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url), spend=True)
    key = SessionKey("acme", "u1", "s1")
    await h.say(key, ("user", "ok thanks!"), ("assistant", "You're welcome."), ("user", "👍"))
    out = await h.pipeline.process_session(key)
    assert out.turns_extracted == 3 and out.error is None
    assert fake_llm.calls("extract") == []
    assert (await h.rows("SELECT count(*) AS n FROM llm_calls"))[0]["n"] == 0
    # a real statement among them is extracted as before
    await h.say(key, ("user", "ok"), ("user", "I moved to Berlin last week"))
    assert (await h.pipeline.process_session(key)).turns_extracted == 2
    assert len(fake_llm.calls("extract")) == 1


async def test_max_tokens_is_sized_from_the_batch(make_harness, fake_llm):
    settings = settings_for(fake_llm.url)
    h = await make_harness(settings)
    key = SessionKey("acme", "u1", "s1")
    await h.say(key, ("user", "I play chess"), ("assistant", "Nice"), ("user", "and go"))
    await h.pipeline.process_session(key)
    [call] = fake_llm.calls("extract")
    x = settings.extract
    assert call["body"]["max_tokens"] == x.answer_tokens_base + 2 * x.answer_tokens_per_turn
    assert call["body"]["max_tokens"] < settings.llm.max_tokens
    off = await make_harness(settings.with_(extract={"answer_tokens_per_turn": 0}))
    await off.say(SessionKey("acme", "u2", "s1"), ("user", "I play go"))
    await off.pipeline.process_session(SessionKey("acme", "u2", "s1"))
    assert fake_llm.calls("extract")[-1]["body"]["max_tokens"] == settings.llm.max_tokens


async def test_an_answer_cut_at_the_sized_cap_is_asked_again_at_the_full_cap(
    make_harness, fake_llm
):
    fake_llm.honour_max_tokens = True
    fake_llm.enqueue(extraction([memory("The user plays the oboe in a quintet")]))
    settings = settings_for(fake_llm.url, answer_tokens_base=4, answer_tokens_per_turn=1)
    h = await make_harness(settings, spend=True)
    key = SessionKey("acme", "u1", "s1")
    await h.say(key, ("user", "I play the oboe in a quintet"))
    out = await h.pipeline.process_session(key)
    assert out.error is None and out.saved == 1
    first, second = fake_llm.calls("extract")
    assert first["body"]["max_tokens"] == 5 and second["body"]["max_tokens"] == 1024
    rows = await h.rows("SELECT sum(calls)::int AS calls FROM llm_usage_daily")
    assert rows[0]["calls"] == 2  # both calls were paid for: both metered


async def test_the_tenant_static_part_comes_first(make_harness, fake_llm):
    """The contract, then the tenant's guidance, then what varies (the reconcile rules
    only when something is shown): every call of a tenant shares its longest prefix."""
    settings = settings_for(fake_llm.url).with_(extract={"custom_instructions": "GUIDE-X"})
    h = await make_harness(settings)
    key = SessionKey("acme", "u1", "s1")
    fake_llm.add_rule("violin", extraction([memory("The user plays the violin")]))
    await h.say(key, ("user", "I play the violin"))
    await h.pipeline.process_session(key)
    await h.say(key, ("user", "I play the violin in an orchestra now"))
    await h.pipeline.process_session(key)
    first, second = (c["messages"][0]["content"] for c in fake_llm.calls("extract"))
    assert first.startswith(EXTRACT_SYSTEM) and "GUIDE-X" in first
    assert RECONCILE_RULES not in first and RECONCILE_RULES in second
    assert second.index("GUIDE-X") < second.index(RECONCILE_RULES)
    assert second.startswith(first)  # the first call's whole system prompt is the prefix
