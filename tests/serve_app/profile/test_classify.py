"""Write-time profile classes: cues, prototypes, typed memories, the learned rule."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.profile.classify import (
    CLASSES,
    INLINE_MAX,
    PROFILE_FEATURES,
    PROTOTYPES,
    LearnedProfile,
    ProfileClassifier,
    Thresholds,
    classify,
    cue_hits,
    profile_features,
    words,
)
from serve_app.settings import ContextSettings, Settings


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


def weights(**named: float) -> tuple[float, ...]:
    """Learned weights: zero but the named features (``bias`` last)."""
    by_name = {f.replace(":", "_"): i for i, f in enumerate(PROFILE_FEATURES)}
    out = [0.0] * (len(PROFILE_FEATURES) + 1)
    for name, w in named.items():
        out[-1 if name == "bias" else by_name[name]] = w
    return tuple(out)


def test_the_learned_rule_wants_one_weight_per_feature_then_the_bias():
    with pytest.raises(ValueError, match="not 3"):
        LearnedProfile((1.0, 2.0, 3.0))
    assert LearnedProfile.of((), 0.5) is None  # no weights: the hand-set thresholds
    assert (
        ProfileClassifier.from_settings(None, ContextSettings(profile_learned=())).learned is None
    )


def test_the_learned_rule_decides_whether_and_the_scores_name_the_class():
    rule = LearnedProfile(weights(unread_language=4.0, bias=-2.0), 0.5)
    sims = {"instruction": 0.2, "constraint": 0.1, "identity": 0.3}
    german = "Bitte antworte mir immer auf Deutsch, auch wenn ich Englisch schreibe."
    assert profile_features(german, "semantic", sims)[PROFILE_FEATURES.index("unread_language")]
    assert classify(german, "semantic", sims, learned=rule) == "identity"  # best score
    english = "Always answer me in short bullet points"
    assert classify(english, "semantic", sims, learned=rule) is None  # the rule said no
    # an event the data shows to be profile material may join (the hand-set rule never)
    events = LearnedProfile(weights(type_episodic=5.0, bias=-1.0), 0.5)
    assert classify("Moved to Madrid in May", "episodic", sims, learned=events) == "identity"
    assert classify("Moved to Madrid in May", "episodic", sims) is None
    # without similarities (no embedder) the cues decide as before
    assert classify("I'm vegan", "semantic", None, learned=rule) == "constraint"
    assert classify("x", "document_chunk", sims, learned=events) is None


def test_the_default_rule_finds_profile_material_in_any_language(encoder):
    """The shipped weights (loadtests/profile_admission.py) on sentences of neither set
    they were fitted on: standing facts in English and in languages the model does not
    read join the profile; events and passing remarks do not."""

    async def embed(texts, *, is_query=False):
        return encoder.encode(list(texts), is_query=is_query)

    clf = ProfileClassifier.from_settings(embed, Settings().context)
    assert clf.learned is not None
    items = {
        "I'm allergic to shellfish": ("semantic", True),
        "My son Leo is 4 and starts school in September": ("semantic", True),
        "Bitte antworte mir immer auf Deutsch.": ("semantic", True),
        "Mi esposa se llama Lucía y vivimos en Valencia.": ("semantic", True),
        "Went to a jazz concert last Friday with Sam": ("episodic", False),
        "Watched a documentary about octopuses yesterday": ("semantic", False),
        "I prefer window seats on flights": ("preference", False),
        "Bought a new blender on sale": ("semantic", False),
    }
    texts = list(items)
    got = asyncio.run(clf.classify_many(texts, [items[t][0] for t in texts], encoder.encode(texts)))
    assert {t: c is not None for t, c in zip(texts, got, strict=True)} == {
        t: want for t, (_, want) in items.items()
    }


def test_a_large_batch_is_classified_off_the_event_loop_with_the_same_answers(encoder):
    texts = [
        "I'm allergic to peanuts",
        "Always answer me in short bullet points",
        "Lives in Oslo near the fjord",
        "Loves green tea, especially sencha",
    ] * 5  # 20: over INLINE_MAX
    assert len(texts) > INLINE_MAX
    types = ["semantic"] * len(texts)
    vectors = encoder.encode(texts)
    clf = ProfileClassifier.from_settings(None, Settings().context)
    threads: list[str] = []
    run = clf._classify_all

    def spy(*args):
        threads.append(threading.current_thread().name)
        return run(*args)

    clf._classify_all = spy  # type: ignore[method-assign]
    many = asyncio.run(clf.classify_many(texts, types, vectors))
    one_by_one = [
        asyncio.run(clf.classify_many([t], ["semantic"], vectors[i : i + 1]))[0]
        for i, t in enumerate(texts)
    ]
    assert many == one_by_one and "constraint" in many
    assert threads[0] != threading.main_thread().name  # the batch ran on a worker thread
    assert set(threads[1:]) == {threading.main_thread().name}  # one memory: inline
