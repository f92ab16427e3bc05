"""The junk guard's restatement check: one statement for a whole batch of sentences,
dropping exactly what a per-sentence nearest-neighbour lookup drops."""

from __future__ import annotations

from serve_app.extraction.junk import contained
from serve_app.extraction.turn import Turn
from serve_app.store import Owner
from serve_app.store.records import NewMemory
from serve_app.text import sentences
from tests.serve_app.extraction.conftest import test_settings as settings_for
from tests.serve_app.statements import StatementCounter

ALICE, BOB = Owner("t1", "alice"), Owner("t1", "bob")
KNOWN = [  # (owner, text, source)
    (ALICE, "The user lives in Lisbon with two cats", "extraction"),
    (ALICE, "The user works as a nurse at the city hospital", "extraction"),
    (ALICE, "The user plays the violin in an orchestra every Sunday", "turn"),
    (BOB, "The user is severely allergic to peanuts", "extraction"),
]
ASSISTANT = [
    "Noted: the user lives in Lisbon with two cats. "  # contains a memory
    "You work as a nurse at the city hospital.",  # a paraphrase
    "So you play violin in an orchestra every Sunday. "  # a paraphrase of a raw-turn memory
    "Avoid peanuts, given your severe peanut allergy. "  # bob's memory, not alice's
    "How about a picnic in Monsanto park?",
]


async def per_sentence(h, owner: Owner, turns: list[Turn]) -> set[str]:
    """What the guard dropped before batching: one nearest lookup per sentence."""
    known = await h.pipeline.index.recent_contents(owner)
    flat = [s for t in turns if t.role == "assistant" for s in sentences(t.content)]
    vectors = await h.pipeline.embed(flat, is_query=False)
    threshold = h.pipeline.settings.extract.restatement_similarity
    junk = set()
    for sentence, vector in zip(flat, vectors, strict=True):
        near = await h.pipeline.index.nearest(owner, vector, 1)
        if contained(sentence, known) or (near and near[0].similarity >= threshold):
            junk.add(sentence)
    return junk


async def test_one_statement_drops_what_per_sentence_lookups_drop(make_harness):
    h = await make_harness(settings_for(None))
    for owner, text, source in KNOWN:
        vec = await h.pipeline.embed([text], is_query=False)
        await h.pipeline.guarded.add(owner, [NewMemory(text, source=source)], vec)
    turns = [
        Turn("user", "Any weekend ideas?", 1),
        Turn("assistant", ASSISTANT[0], 2),
        Turn("user", "Hmm.", 3),
        Turn("assistant", ASSISTANT[1], 4),
    ]
    expected = await per_sentence(h, ALICE, turns)
    counter = StatementCounter(h.pipeline.index.pool)
    h.pipeline.index.pool = counter
    kept, dropped = await h.pipeline._drop_restatements(ALICE, turns)
    assert counter.statements == 2  # the containment texts, then every sentence at once
    flat = [s for t in ASSISTANT for s in sentences(t)]
    assert len(flat) == 5 and dropped == len(expected)
    assert {s for s in flat if s not in " ".join(t.content for t in kept)} == expected
    assert expected == set(flat[:3])
    assert contained(flat[0], [KNOWN[0][1]]) and not contained(flat[1], [KNOWN[1][1]])
    assert [t.turn_index for t in kept] == [1, 3, 4]
    assert kept[2].content == " ".join(flat[3:])


async def test_no_memories_of_the_user_gives_no_similarity(make_harness):
    h = await make_harness(settings_for(None))
    vec = await h.pipeline.embed(["The user is severely allergic to peanuts"], is_query=False)
    await h.pipeline.guarded.add(BOB, [NewMemory("The user is severely allergic to peanuts")], vec)
    assert (
        await h.pipeline.index.best_similarities(BOB, [vec[0], vec[0]])
        == [(await h.pipeline.index.nearest(BOB, vec[0], 1))[0].similarity] * 2
    )
    assert await h.pipeline.index.best_similarities(ALICE, [vec[0], vec[0]]) == [None, None]
    assert await h.pipeline.index.best_similarities(ALICE, []) == []


async def test_each_memory_is_normalised_once_per_batch(make_harness, monkeypatch):
    """Containment normalised every known memory again for every sentence: sentences x
    memories normalisations (200 sentences x 200 memories of 2000 characters: 3.4 s)."""
    import serve_app.extraction.junk as junk

    h = await make_harness(settings_for(None))
    for _, text, source in KNOWN[:3]:
        vec = await h.pipeline.embed([text], is_query=False)
        await h.pipeline.guarded.add(ALICE, [NewMemory(text, source=source)], vec)
    said = " ".join(f"Idea number {i} is a walk by the river." for i in range(40))
    turns = [Turn("user", "Ideas?", 1), Turn("assistant", said, 2)]
    calls: list[str] = []
    real = junk.normalize
    monkeypatch.setattr(junk, "normalize", lambda t: calls.append(t) or real(t))
    kept, dropped = await h.pipeline._drop_restatements(ALICE, turns)
    assert dropped == 0 and kept == turns
    assert len(calls) <= 40 + 2  # each sentence and each memory of the owner, once
