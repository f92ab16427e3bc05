"""Write-time profile classes (issue 29): cues, prototypes, typed memories, overrides."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.profile.classify import (
    CLASSES,
    PROTOTYPES,
    ProfileClassifier,
    Thresholds,
    classify,
    cue_hits,
    words,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("I'm allergic to peanuts", "constraint"),
        ("I'm vegetarian", "constraint"),
        ("I use a wheelchair", "constraint"),
        ("Always answer me in short bullet points", "instruction"),
        ("Don't use emojis in your answers", "instruction"),
        ("Lives in Oslo near the fjord", "identity"),
        ("My daughter Emma is 7", "identity"),
        ("Works as a nurse at the hospital", "identity"),
        ("Loves green tea, especially sencha", None),
        ("Plays bass guitar in a garage band", None),
    ],
)
def test_cues_alone_classify(text, want):
    assert classify(text, "semantic", None) == want


def test_events_are_never_profile():
    text = "Moved to Madrid last week and I'm allergic to the dust"
    assert classify(text, "episodic", None) is None


def test_prototype_similarity_without_a_cue():
    near = {"instruction": 0.1, "constraint": 0.7, "identity": 0.2}
    assert classify("Sugar makes me ill", "semantic", near) == "constraint"
    far = {"instruction": 0.1, "constraint": 0.4, "identity": 0.2}
    assert classify("Sugar makes me ill", "semantic", far) is None


def test_typed_procedural_leans_to_instruction():
    sims = {"instruction": 0.55, "constraint": 0.1, "identity": 0.1}
    t = Thresholds(without_cue=0.62)
    assert classify("Format dates as day month year", "semantic", sims, t) is None
    assert classify("Format dates as day month year", "procedural", sims, t) == "instruction"


def test_word_scan_is_plain_and_linear():
    assert words("Don\u2019t use -- emojis!!") == ["don't", "use", "emojis"]
    assert cue_hits("a" * 100_000)["constraint"] == 0  # long input, no backtracking


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_the_ascii_fast_path_finds_the_scans_words(text):
    from serve_app.profile.classify import scan_words

    assert words(text) == scan_words(text.lower())
    assert words(text + "été") == scan_words((text + "été").lower())


def test_classifier_embeds_prototypes_once_and_uses_them():
    calls = []
    dim = 4

    async def embed(texts, *, is_query):
        calls.append(list(texts))
        out = np.zeros((len(texts), dim), dtype=np.float32)
        i = 0
        for k, c in enumerate(CLASSES):
            for _ in PROTOTYPES[c]:
                out[i, k] = 1.0
                i += 1
        return out

    clf = ProfileClassifier(embed)
    vec = np.array([[0.0, 0.0, 0.9, 0.0], [0.0, 0.0, 0.0, 1.0]], dtype=np.float32)

    async def go():
        a = await clf.classify_many(["x y z", "x y z"], ["semantic", "semantic"], vec)
        b = await clf.classify_many(["x y z"], ["semantic"], vec[:1])
        return a, b

    a, b = asyncio.run(go())
    assert a == ["identity", None] and b == ["identity"]
    assert len(calls) == 1  # prototypes embedded once


def test_classifier_without_embedder_falls_back_to_cues():
    async def broken(texts, *, is_query):
        raise RuntimeError("embedder down")

    clf = ProfileClassifier(broken)
    got = asyncio.run(
        clf.classify_many(["I'm vegan", "Likes jazz"], ["semantic", "semantic"], np.zeros((2, 3)))
    )
    assert got == ["constraint", None]
