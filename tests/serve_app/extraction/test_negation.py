"""A memory that says the opposite of what the user said is dropped (issue 29,
serve_app/extraction/negation.py); agreeing memories, changes of mind, questions and
the assistant's words never cause a drop."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from serve_app.extraction.grounding import Limits
from serve_app.extraction.negation import clauses, negated, without_negated
from serve_app.extraction.parser import ExtractedMemory
from serve_app.extraction.turn import Turn
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

THU = datetime(2026, 4, 2, 18, 0, tzinfo=UTC)


def mems(*contents: str) -> list[ExtractedMemory]:
    return [ExtractedMemory(type="fact", content=c) for c in contents]


def drops(said: str | Sequence[tuple[str, str]], *contents: str) -> list[str]:
    turns = [("user", said), ("assistant", "Noted!")] if isinstance(said, str) else said
    ts = [Turn(role, text, i) for i, (role, text) in enumerate(turns)]
    return [c.value for c in negated(ts, mems(*contents), Limits())]


def test_a_memory_that_negates_what_the_user_said_is_dropped():
    assert drops("I love fish", "The user does not eat fish") == ["The user does not eat fish"]
    assert drops("I hate fish.", "The user loves fish") == ["The user loves fish"]
    assert drops("We adopted a dog last week", "The user never had a dog") == [
        "The user never had a dog"
    ]


def test_agreeing_memories_are_kept():
    assert drops("I love fish", "The user loves fish", "Fish is the user's favourite") == []
    assert drops("I hate fish", "User dislikes fish", "The user doesn't like fish") == []
    assert drops("I quit smoking last year", "The user does not smoke") == []
    assert drops("I gave up meat in May", "The user no longer eats meat") == []
    assert drops("I'm allergic to peanuts", "The user cannot eat peanuts") == []
    # a comma ends a clause: "no more meat" does not make "vegetarian" negative
    assert drops("I'm vegetarian now, no more meat.", "The user is vegetarian") == []


def test_one_agreeing_clause_keeps_the_memory():
    changed = "I love fish. Actually, I don't eat fish any more."
    assert drops(changed, "The user does not eat fish") == []
    assert drops("I love fish", "The user loves fish and does not eat meat") == []


def test_questions_and_the_assistant_neither_support_nor_contradict():
    asked = [("assistant", "Do you eat fish?"), ("user", "No.")]
    assert drops(asked, "The user does not eat fish") == []  # a miss, not a false drop
    assert drops([("user", "Do you think I eat too much fish?")], "User avoids fish") == []
    assert drops([("assistant", "You love fish!")], "The user does not eat fish") == []
    assert drops("Nice weather today", "The user does not eat fish") == []  # not talked about


def test_clauses_and_polarity():
    got = clauses("I don't eat meat, but I love fish; do you? 3.5 stars, no way", 1000)
    assert [(sorted(c.units), c.negative, c.question) for c in got] == [
        (["eat", "meat"], True, False),
        (["fish", "love"], False, False),
        ([], False, True),
        (["35", "star"], False, False),  # digit groups joined, as grounding does
        (["way"], True, False),
    ]
    assert clauses("I don't hate fish", 1000)[0].negative is False  # two negations


CONTENT = st.text(alphabet=st.sampled_from(list("abfhilnost ',.!?")), max_size=80)


@given(st.text(max_size=300), st.lists(CONTENT.filter(lambda c: c.strip(" ',.!?")), max_size=4))
def test_never_raises_and_only_drops_what_it_was_given(said, contents):
    kept, dropped = without_negated([Turn("user", said, 1)], mems(*contents), Limits())
    assert len(kept) + len(dropped) == len(contents)
    assert {c.reason for c in dropped} <= {"negated"}


def test_long_turns_are_scanned_up_to_the_cap():
    said = "I love fish. " * 50_000
    assert drops(said, "The user does not eat fish") == ["The user does not eat fish"]
    assert len(clauses("fish " * 100_000, 50)) == 1  # one clause of the first 50 chars


# ---------------------------------------------------------------- through the pipeline


async def test_the_pipeline_drops_and_counts_a_negated_memory(make_harness, fake_llm):
    """The scripted model answers the user's "I love fish" with one memory that says it
    and one that says the opposite: the second is dropped and counted (reason negated)."""
    h = await make_harness(settings_for(fake_llm.url))
    fake_llm.enqueue(
        extraction([memory("The user loves fish"), memory("The user does not eat fish")])
    )
    key = SessionKey("t1", "fay", "s1")
    await h.turns.append(
        key,
        [("user", "I love fish, especially salmon.")],
        agent_id=None,
        ttl_hours=1.0,
        occurred_at=[THU],
    )
    out = await h.pipeline.process_session(key)
    assert out.error is None and out.ungrounded == 1
    contents = {m["content"] for m in await h.memories("fay")}
    assert "The user loves fish" in contents and "The user does not eat fish" not in contents
    assert h.pipeline.metrics.ungrounded_items.totals == {("memory", "negated"): 1}


async def test_with_the_check_off_the_negated_memory_is_written(make_harness, fake_llm):
    h = await make_harness(settings_for(fake_llm.url, ground=False))
    fake_llm.enqueue(extraction([memory("The user does not eat fish")]))
    key = SessionKey("t1", "gus", "s1")
    await h.turns.append(
        key, [("user", "I love fish.")], agent_id=None, ttl_hours=1.0, occurred_at=[THU]
    )
    out = await h.pipeline.process_session(key)
    assert out.ungrounded == 0
    assert [m["content"] for m in await h.memories("gus")] == ["The user does not eat fish"]
