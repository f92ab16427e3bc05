"""Group sessions on a real database, the real encoder and the scripted LLM: each
speaker's statements about themselves go to their own memory in one extraction, a guest's
go to nobody's, and a forget of a speaker takes what the group session stored for them."""

from __future__ import annotations

import asyncio
import json

from serve_app.db.pool import open_pool
from serve_app.extraction.speakers import SPEAKER_RULES
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.turns import SessionKey, Speaker
from serve_app.testing.llm_server import extraction, fact, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

T = "t1"
KEY = SessionKey(T, "ann", "dinner-club")
SAID = [
    (("user", "I went vegetarian last month"), Speaker()),
    (("user", "Careful, I'm allergic to walnuts"), Speaker("Bo", "bo")),
    (("user", "I just moved to Oslo"), Speaker("Sam")),
    (("assistant", "You could all try a tofu stir fry"), Speaker()),
]


def about(item: dict, alias: str) -> dict:
    return {**item, "about": alias}


ANSWER = extraction(
    [
        about(memory("The user is vegetarian since last month"), "me"),
        about(memory("Bo is allergic to walnuts"), "s1"),
        about(memory("Sam just moved to Oslo"), "s2"),  # a guest's own statement
        about(memory("Sam (a friend in the dinner club) just moved to Oslo"), "me"),
    ],
    [
        about(fact("constraint", "diet", "vegetarian"), "me"),
        about(fact("constraint", "allergy", "walnuts"), "s1"),
        about(fact("identity", "home", "Oslo"), "s2"),
    ],
)


async def say_all(h) -> None:
    await h.turns.append(
        KEY,
        [m for m, _ in SAID],
        agent_id=None,
        ttl_hours=1.0,
        speakers=[s for _, s in SAID],
    )


async def contents(h, user: str) -> list[str]:
    return sorted(r["content"] for r in await h.memories(user, "extraction"))


async def facts(h, user: str) -> list[tuple[str, str]]:
    rows = await h.rows("SELECT key, value FROM facts WHERE user_id = %s ORDER BY key", user)
    return [(r["key"], r["value"]) for r in rows]


async def test_each_speaker_gets_what_they_said_about_themselves(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    await say_all(h)
    fake_llm.enqueue(ANSWER)
    out = await h.pipeline.process_session(KEY, force=True)
    assert out.error is None
    assert await contents(h, "ann") == [
        "Sam (a friend in the dinner club) just moved to Oslo",
        "The user is vegetarian since last month",
    ]
    assert await contents(h, "bo") == ["Bo is allergic to walnuts"]
    assert await h.rows("SELECT id FROM memory_items WHERE content LIKE 'Sam just%%'") == []
    assert await facts(h, "ann") == [("diet", "vegetarian")]
    assert await facts(h, "bo") == [("allergy", "walnuts")]
    counts = h.pipeline.metrics.counts
    assert counts["memories_third_party"] == 1 and counts["facts_third_party"] == 1
    # What the model was shown: who said what, the rules, the schema asking "about".
    [call] = fake_llm.calls("extract")
    system, user = (m["content"] for m in call["messages"])
    assert SPEAKER_RULES in system
    assert "s1 (Bo): a user of the platform" in user and "s2 (Sam): no account" in user
    assert "user s1 (Bo): Careful, I'm allergic to walnuts" in user
    assert "user me: I went vegetarian" in user
    schema = call["body"]["response_format"]["json_schema"]
    assert schema["name"] == "memserve_extraction_group"
    item = schema["schema"]["properties"]["memories"]["items"]
    assert "about" in item["required"]


async def test_a_one_to_one_session_is_unchanged(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url))
    await h.say(KEY, ("user", "I went vegetarian last month"))
    # An "about" the prompt never asked for still lands with the session's user.
    fake_llm.enqueue(extraction([about(memory("The user is vegetarian"), "s1")]))
    await h.pipeline.process_session(KEY, force=True)
    assert await contents(h, "ann") == ["The user is vegetarian"]
    [call] = fake_llm.calls("extract")
    assert SPEAKER_RULES not in call["messages"][0]["content"]
    assert call["body"]["response_format"]["json_schema"]["name"] == "memserve_extraction"


async def test_a_decision_on_the_owners_row_is_a_new_memory_for_another_speaker(
    make_harness, fake_llm
):
    """The reconcile block shows the session owner's memories: an UPDATE of one of them
    about another speaker must not touch the owner's row."""
    h = await make_harness(settings_for(fake_llm.url))
    await h.say(SessionKey(T, "ann", "s0"), ("user", "I am allergic to peanuts"))
    fake_llm.enqueue(extraction([memory("The user is allergic to peanuts")]))
    await h.pipeline.process_session(SessionKey(T, "ann", "s0"), force=True)
    await say_all(h)
    update = {
        "event": "UPDATE",
        "target": "m1",
        "type": "fact",
        "content": "Bo is allergic to walnuts",
        "importance": 0.8,
        "confidence": 0.9,
        "about": "s1",
    }
    fake_llm.enqueue(json.dumps({"memories": [update], "facts": []}))
    await h.pipeline.process_session(KEY, force=True)
    assert await contents(h, "ann") == ["The user is allergic to peanuts"]
    assert await contents(h, "bo") == ["Bo is allergic to walnuts"]


async def test_forgetting_a_speaker_takes_their_memories_and_their_words(
    make_harness, fake_llm, encoder
):
    h = await make_harness(settings_for(fake_llm.url))
    await say_all(h)
    fake_llm.enqueue(ANSWER)
    await h.pipeline.process_session(KEY, force=True)
    counts = await ForgetStore(h.pool, encoder.spec.table_slug).forget(Scope(T, "bo"))
    assert counts["turns"] == 1  # Bo's turn in Ann's session
    assert await contents(h, "bo") == [] and await facts(h, "bo") == []
    left = await h.rows("SELECT content, speaker_id FROM session_turns ORDER BY turn_index")
    assert [r["speaker_id"] for r in left] == [None, None, None]
    assert len(await contents(h, "ann")) == 2  # Ann's own memories stay


async def test_work_begun_before_a_speakers_forget_writes_nothing_for_them(
    make_harness, fake_llm, encoder
):
    """The erasure guard of a speaker's memory is that speaker's forget: extraction of
    Ann's group session that read its turns before Bo was forgotten stores nothing of
    Bo's, and Ann's memories still land."""
    settings = settings_for(fake_llm.url)
    h = await make_harness(settings)

    async def forget_bo() -> None:  # on the scripted server's thread: a loop and pool of its own
        pool = await open_pool(h.pool.conninfo, settings, min_size=1)
        try:
            await ForgetStore(pool, encoder.spec.table_slug).forget(Scope(T, "bo"))
        finally:
            await pool.close()

    def forget_bo_mid_call(kind: str, messages: list) -> None:
        if kind == "extract":
            asyncio.run(forget_bo())

    await say_all(h)
    fake_llm.on_request = forget_bo_mid_call
    fake_llm.enqueue(ANSWER)
    await h.pipeline.process_session(KEY, force=True)
    assert await contents(h, "bo") == [] and await facts(h, "bo") == []
    assert len(await contents(h, "ann")) == 2
