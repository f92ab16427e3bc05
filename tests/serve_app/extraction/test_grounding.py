"""The grounding check (serve_app/extraction/grounding.py) with the real encoder: what the
new turns support is kept (paraphrases, resolved dates, insights), what the model copied
from the known block is dropped."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import numpy as np
import pytest
import snowballstemmer

from serve_app.extraction.grounding import Limits, content_units, ungrounded, words
from serve_app.extraction.outcome import Outcome
from serve_app.extraction.parser import ExtractedFact, ExtractedMemory
from serve_app.extraction.reconcile import Known, Shown
from serve_app.extraction.turn import Turn
from serve_app.store.records import Owner
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, fact, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

THU = datetime(2026, 4, 2, 18, 0, tzinfo=UTC)
KNOWN = [
    "The user lives in Paris-1234",
    "The user follows a vegetarian diet",
    "The user is dating Alex-1234",
    "The user plans a trip to Rome-1234 on 2026-03-20",
    "The user met Ana on 2026-03-30",
    "The user eats healthy food",
    ("preference", "diet", "vegetarian"),
    ("identity", "car", "2015 Honda Civic"),
]


def known(items: Sequence[str | tuple[str, str, str]] = KNOWN) -> Known:
    k = Known(Owner("t1", "alice"))
    for n, item in enumerate(items, 1):
        if isinstance(item, tuple):
            category, key, value = item
            k.items[f"f{n}"] = Shown(
                f"f{n}", "fact", uuid.uuid4(), value, 0, "alice", category, key
            )
        else:
            k.items[f"m{n}"] = Shown(f"m{n}", "memory", uuid.uuid4(), item, 0, "alice")
    return k


@pytest.fixture
def embed(encoder):
    calls: list[int] = []

    async def run(texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        calls.append(len(texts))
        return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

    run.calls = calls  # type: ignore[attr-defined]
    return run


def mem(content: str, type_: str = "fact") -> ExtractedMemory:
    return ExtractedMemory(type=type_, content=content)


async def dropped(
    embed,
    said: str,
    memories: Sequence[str] = (),
    facts: Sequence[tuple[str, str]] = (),
    shown: Known | None = None,
) -> list[str]:
    turns = [Turn("user", said, 1, THU), Turn("assistant", "Thanks for telling me!", 2, THU)]
    ms = [mem(m) for m in memories]
    fs = [ExtractedFact(category="preference", key=k, value=v) for k, v in facts]
    block = shown or known()
    return [c.value for c in await ungrounded(turns, block, ms, fs, embed, Limits())]


async def test_a_supported_paraphrase_is_kept(embed):
    moved = ["The user lives in Berlin-1234", "The user moved to Berlin-1234"]
    assert await dropped(embed, "Big news: I moved to Berlin-1234.", moved) == []
    same = ["The user lives in Paris-1234"]
    assert await dropped(embed, "I still live in Paris-1234.", same) == []
    assert await dropped(embed, "I'm with Sam-1234 now.", ["The user is dating Sam-1234"]) == []


async def test_a_value_copied_from_the_known_block_is_dropped(embed):
    said = "Dr Lee agreed I switch: I'm pescatarian now."
    gone = await dropped(
        embed,
        said,
        ["The user follows a vegetarian diet", "The user follows a pescatarian diet"],
        [("diet", "vegetarian"), ("diet", "pescatarian")],
    )
    assert gone == ["The user follows a vegetarian diet", "vegetarian"]
    car = [("car", "2015 Honda Civic")]
    assert await dropped(embed, "I sold my car last week.", [], car) == ["2015 Honda Civic"]
    paris = ["The user lives in Paris-1234"]
    assert await dropped(embed, "I moved to Berlin-1234 last month.", paris) == paris


async def test_an_item_sharing_a_word_with_the_turns_is_kept(embed):
    """A confirmation keeps its item; so, by the same word count, does a negation that
    names the old value (that one is reconcile's INVALIDATE/UPDATE, not this check's)."""
    blue = ["Blue is the user's favourite colour"]
    k = known(["The user's favourite colour is blue"])
    assert await dropped(embed, "blue, definitely", blue, shown=k) == []
    alex = ["The user is dating Alex-1234"]
    assert await dropped(embed, "Alex-1234 and I split up; I'm with Sam-1234 now.", alex) == []
    trip = ["The user plans a trip to Rome-1234 on 2026-03-20"]
    assert await dropped(embed, "We cancelled the Rome-1234 trip.", trip) == []


async def test_a_resolved_relative_date_is_kept(embed):
    met = ["The user met Ana on 2026-04-01"]
    assert await dropped(embed, "I met Ana again yesterday.", met) == []
    trip = ["The user plans a trip to Rome-1234 on 2026-04-03"]
    assert await dropped(embed, "We're flying to Rome-1234 next Friday!", trip) == []


async def test_an_insight_built_on_the_turns_is_kept(embed):
    said = "Salad for lunch again, I jogged 5k this morning and did yoga in the evening."
    kept = [
        "The user has a health-focused routine of running and yoga",
        "The user values healthy eating and regular exercise",
    ]
    assert await dropped(embed, said, kept) == []


async def test_nothing_shown_nothing_checked(embed):
    turns = [Turn("user", "Hi", 1, THU)]
    out = await ungrounded(
        turns, Known(Owner("t1", "a")), [mem("The user lives in Paris")], [], embed, Limits()
    )
    assert out == [] and embed.calls == []


async def test_only_flagged_items_reach_the_encoder(embed):
    """Step 2 runs only for what step 1 flags: a grounded batch costs no encoder call."""
    await dropped(embed, "Big news: I moved to Berlin-1234.", ["The user lives in Berlin-1234"])
    assert embed.calls == []
    await dropped(embed, "I sold my car last week.", [], [("car", "2015 Honda Civic")])
    assert len(embed.calls) == 1


def test_words_keep_names_and_numbers_whole_and_respect_the_cap():
    assert words("The user's budget is $10,000 for Berlin-1234; gluten-free, don't", 1000) == [
        "the",
        "user",
        "budget",
        "is",
        "10000",
        "for",
        "berlin-1234",
        "gluten-free",
        "dont",
    ]
    assert words("word " * 100_000, 50) == ["word"] * 10
    assert content_units("The user lives in Berlin-1234 now", 1000) == ["live", "berlin-1234"]


# ---------------------------------------------------------------- through the pipeline


async def _diet_change(h, fake_llm, user: str) -> tuple[Outcome, dict]:
    """Session 1 stores diet = vegetarian; session 2 the user says pescatarian and the
    model answers the new value and, after it, the known one re-asserted."""
    fake_llm.enqueue(
        extraction(
            [memory("The user follows a vegetarian diet")],
            [fact("preference", "diet", "vegetarian")],
        )
    )
    await h.turns.append(
        SessionKey("t1", user, "s1"),
        [("user", "I'm vegetarian these days.")],
        agent_id=None,
        ttl_hours=1.0,
        occurred_at=[THU],
    )
    assert (await h.pipeline.process_session(SessionKey("t1", user, "s1"))).error is None
    fake_llm.enqueue(
        extraction(
            [
                memory("The user switched to a pescatarian diet"),
                memory("The user is a vegetarian who follows a vegetarian diet"),
            ],
            [fact("preference", "diet", "pescatarian"), fact("preference", "diet", "vegetarian")],
        )
    )
    k2 = SessionKey("t1", user, "s2")
    await h.turns.append(
        k2,
        [("user", "Dr Lee agreed I switch: I'm pescatarian now.")],
        agent_id=None,
        ttl_hours=1.0,
        occurred_at=[THU],
    )
    out = await h.pipeline.process_session(k2)
    [call] = fake_llm.calls("extract")[-1:]
    assert "preference/diet = vegetarian" in call["messages"][-1]["content"]  # it was shown
    [diet] = await h.rows("SELECT value FROM facts WHERE user_id = %s AND active", user)
    return out, diet


async def test_the_pipeline_drops_and_counts_a_fact_copied_from_the_known_block(
    make_harness, fake_llm
):
    h = await make_harness(settings_for(fake_llm.url))
    out, diet = await _diet_change(h, fake_llm, "dora")
    assert out.error is None and out.ungrounded == 2
    assert diet["value"] == "pescatarian"
    contents = {m["content"] for m in await h.memories("dora")}
    assert "The user switched to a pescatarian diet" in contents
    assert "The user is a vegetarian who follows a vegetarian diet" not in contents
    counts = h.pipeline.metrics.counts
    assert counts["ungrounded_fact"] == 1 and counts["ungrounded_memory"] == 1
    assert h.pipeline.metrics.ungrounded_items.totals == {
        ("fact", "copied_known"): 1,
        ("memory", "copied_known"): 1,
    }


async def test_without_the_check_the_stale_value_wins(make_harness, fake_llm):
    """The setting off (MEMSERVE_EXTRACT_GROUND=false): what the check prevents."""
    h = await make_harness(settings_for(fake_llm.url, ground=False))
    out, diet = await _diet_change(h, fake_llm, "erin")
    assert out.ungrounded == 0 and diet["value"] == "vegetarian"
    assert h.pipeline.metrics.counts["ungrounded_fact"] == 0


def test_units_are_the_same_from_concurrent_threads():
    """Extractions run the lexical step in threads at once; a Snowball stemmer keeps state
    per call (one shared by threads raises IndexError or mixes words up)."""

    def word(i: int) -> str:  # a word no other test stems (each is a cache miss)
        letters = ""
        while True:
            i, r = divmod(i, 26)
            letters += chr(97 + r)
            if i == 0:
                return "zq" + letters + "ings"

    n = 4000
    texts = [
        f"The user follows {word(3 * i)} {word(3 * i + 1)} {word(3 * i + 2)}" for i in range(n)
    ]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: content_units(t, 1000), texts))
    fresh = snowballstemmer.stemmer("english")  # the reference: one thread, no cache
    want = [["follow", *(fresh.stemWord(word(3 * i + j)) for j in range(3))] for i in range(n)]
    assert got == want
    assert got[0] == ["follow", "zqa", "zqbing", "zqcing"]
