"""Life topics: a message and a memory that share no words, bridged by the topic both are
about; with the real encoder (the topic is chosen by cosine) and a scripted search."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest

from serve_app.context import ContextBuilder, ContextRequest
from serve_app.context.topics import Topics
from serve_app.settings.retrieval import DEFAULT_TOPICS
from tests.serve_app.context.test_levers import ALL, Backend, mem

CAR = "the user's car or vehicle"
MESSAGE = "Can you book me a car wash?"  # the README's own example


@pytest.fixture(scope="module")
def topics(encoder):
    async def embed(texts, *, is_query, bulk=False):
        return encoder.encode(list(texts), is_query=is_query)

    return Topics(embed)


def test_a_message_about_one_topic_is_given_it(topics):
    found = asyncio.run(topics.of(MESSAGE, 0.3, 0.1))
    assert found is not None and found.text == CAR and found.margin >= 0.1
    pets = asyncio.run(topics.of("My pets keep fighting", 0.3, 0.1))
    assert pets is not None and pets.text == "the user's pets and animals"
    assert asyncio.run(topics.of("hello", 0.9, 0.0)) is None  # near nothing: no topic
    assert asyncio.run(topics.of(MESSAGE, 0.3, 0.5)) is None  # not clearly nearer: none


def test_the_descriptions_are_embedded_once(encoder):
    calls = []

    async def embed(texts, *, is_query, bulk=False):
        calls.append((len(texts), is_query))
        return encoder.encode(list(texts), is_query=is_query)

    t = Topics(embed)
    for text in ("my dog barks", "my cat sleeps"):
        asyncio.run(t.of(text, -1.0, 0.0))
    assert calls == [(len(DEFAULT_TOPICS), False), (1, True), (1, True)]
    assert np.allclose(np.linalg.norm(asyncio.run(t.vectors()), axis=1), 1.0, atol=1e-3)


def test_the_bridge_admits_a_memory_near_the_topic_that_the_gate_left_out(topics):
    tesla = mem("I drive a Tesla Model 3", 0.22, 0.4)
    chess = mem("Plays chess on Sundays", 0.21, 0.3)
    topic_rows = [dict(tesla, similarity=0.55), dict(chess, similarity=0.12)]
    b = Backend(by_text={MESSAGE: [tesla, chess], CAR: topic_rows})
    builder = ContextBuilder(b.search, b.facts, b.profile, topics=topics)

    def run(levers):
        req = ContextRequest("t", "u", MESSAGE, levers=levers)
        return asyncio.run(builder.build(req))

    assert run(ALL).memories == []  # the gate alone: cosines 0.21-0.22
    bridged = replace(ALL, topic_bridge=True, topic_min_cosine=0.3, topic_margin=0.1)
    block = run(bridged)
    assert [m["content"] for m in block.memories] == ["I drive a Tesla Model 3"]
    assert block.memories[0]["why"].startswith(f"about {CAR}")
    assert any(CAR in texts for texts in b.calls)  # the topic was searched in the same call
    none = run(replace(bridged, topic_similarity=0.6))  # under the memory's bar: nothing
    assert none.memories == []
