"""bench_context's scoring and the gate calibration replay (issue 29), without a service."""

from __future__ import annotations

import json
from dataclasses import replace

from loadtests.bench_context import DATA, ScriptedExtractor, settings_for
from loadtests.context_calibrate import Candidate, Sample, calibrate, replay
from loadtests.context_metrics import Labels, classifier_scores, outcome, summarise
from serve_app.context.evidence import Evidence


def test_data_set_meets_the_issue():
    data = json.loads(DATA.read_text())
    assert len(data["users"]) >= 5
    assert all(10 <= len(u["memories"]) + len(u["facts"]) <= 40 for u in data["users"])
    assert len(data["messages"]) >= 60
    keys = {u["id"]: {m["key"] for m in u["memories"]} for u in data["users"]}
    for msg in data["messages"]:
        assert set(msg["needs"]) <= keys[msg["user"]], msg  # every annotation resolves
    assert sum(1 for m in data["messages"] if not m["needs"]) >= 5  # small talk


def test_recall_and_unneeded_share():
    lab = Labels({"1": "allergy", "2": "diet", "3": "spanish", "4": "city"}, {"allergy", "diet"})
    o = outcome(lab, ["allergy", "diet"], profile_ids=["1"], other_ids=["3", "1"])
    assert o.got == {"allergy", "spanish"} and o.outside_profile == {"spanish"}
    s = summarise([o], {"allergy", "diet"})
    assert s["needed_recall"] == 0.5
    assert s["unneeded_share"] == 1.0  # spanish: the one non-profile item, not needed
    assert s["retrieved_unneeded_share"] == 1.0


def test_classifier_scores():
    s = classifier_scores(
        {"a": "constraint", "b": None, "c": "identity"},
        {"a": "constraint", "b": "identity", "c": None},
    )
    assert s["precision"] == 0.5 and s["recall"] == 0.5 and s["class_accuracy"] == 1.0


def test_calibration_prefers_recall_under_the_noise_bound():
    samples = [
        Sample(
            "recommend a green tea",
            frozenset({"tea"}),
            [Candidate("tea", 0.5, "Loves green tea"), Candidate("oslo", 0.3, "Lives in Oslo")],
        ),
        Sample(
            "any bakeries nearby",
            frozenset({"bakery"}),
            [Candidate("bakery", 0.3, "Favourite bakery is Apent")],
        ),
    ]
    assert replay(samples, Evidence(0.45, 0.25))["needed_kept_share"] == 1.0
    assert replay(samples, Evidence(0.25, 0.25))["unneeded_share"] > 0  # oslo gets in
    # the margin alone keeps oslo out: 0.3 is more than 0.1 below the message's best (0.5)
    assert replay(samples, Evidence(0.25, 0.25, margin=0.1))["unneeded_share"] == 0.0
    pick = calibrate(samples)["pick"]
    assert pick["needed_kept_share"] == 1.0 and pick["unneeded_share"] == 0.0


def test_variants_switch_levers_and_the_scripted_llm_extracts_what_was_said():
    assert settings_for("baseline", {})["MEMSERVE_CONTEXT_PROFILE"] == "false"
    assert "MEMSERVE_CONTEXT_PROFILE" not in settings_for("all", {})
    data = json.loads(DATA.read_text())
    fake = ScriptedExtractor(data)
    text = "[1] user: By the way: I'm allergic to peanuts"
    got = json.loads(fake("extract", [{"role": "user", "content": text}]))
    assert [m["class"] for m in got["memories"]] == ["constraint"]
    assert fake("chat", []) is None


def test_calibration_replays_the_time_free_cosine():
    """A candidate's ``topic`` cosine (to the message without its time words) is what the
    time-free rule judges; the levers report says what the rule does without it."""
    menu = Sample(
        "Suggest a dinner menu for guests on Saturday",
        frozenset({"fish"}),
        [
            Candidate("fish", 0.45, "Eats fish, no meat", topic=0.47),
            Candidate("tennis", 0.40, "Plays tennis on Wednesday evenings", topic=0.27),
        ],
        half="held_out",
    )
    free = Evidence(0.35, 0.15, 0.1, 2, False, True)
    assert replay([menu], free)["unneeded_share"] == 0.0
    assert replay([menu], replace(free, time_free=False))["unneeded_share"] == 0.5
    cal = Sample("recommend a green tea", frozenset({"tea"}), [Candidate("tea", 0.5, "Loves tea")])
    out = calibrate([cal, menu])
    assert out["pick"]["time_free"] is True  # a tie on the calibration half: the cause decides
    assert out["levers"]["time_free"]["pick_without"]["held_out"]["unneeded_share"] == 0.5
