"""The knowledge-update benchmark's scripted models decide from what the prompt shows."""

from __future__ import annotations

import json
import random

from loadtests.knowledge_scenarios import DATES, ScriptedModel, make_user
from serve_app.extraction.reconcile import KNOWN_HEADER


def ask(model: ScriptedModel, turn: str, known: dict[str, str]) -> list[dict]:
    prompt = f"Conversation:\n[3] (Mon 2026-03-16) user: {turn}\n[4] assistant: ok"
    if known:
        prompt += f"\n\n{KNOWN_HEADER}\n" + "\n".join(f"{a}: {t}" for a, t in known.items())
    answer = model(
        "extract", [{"role": "system", "content": "x"}, {"role": "user", "content": prompt}]
    )
    return json.loads(answer)["memories"]


def test_good_model_updates_noops_and_invalidates_only_what_it_was_shown():
    u = make_user("ku-good-g0001", "good", random.Random(1))
    model = ScriptedModel([u])
    first_city, moved = u.sessions[0][0], u.sessions[1][2]
    assert moved.attribute == first_city.attribute == "city"
    [upd] = ask(model, moved.turn, {"m1": first_city.memory, "m2": "The user likes tea"})
    assert (upd["event"], upd["target"], upd["content"]) == ("UPDATE", "m1", moved.memory)
    assert upd["turns"] == [3]
    [add] = ask(model, moved.turn, {"m1": "The user likes tea"})  # the old one not shown
    assert add["event"] == "ADD" and "target" not in add
    [noop] = ask(model, u.sessions[3][2].turn, {"m4": u.sessions[3][1].memory})
    assert (noop["event"], noop["target"]) == ("NOOP", "m4")
    plan, cancel = u.sessions[1][1], u.sessions[2][0]
    [inv] = ask(model, cancel.turn, {"m2": plan.memory})
    assert (inv["event"], inv["target"]) == ("INVALIDATE", "m2")
    assert ask(model, cancel.turn, {}) == []  # nothing to cancel that it can see


def test_ground_truth_over_time_and_the_other_cohorts():
    u = make_user("ku-good-g0002", "good", random.Random(2))
    assert u.at("plan", DATES[1]) is not None and u.at("plan", DATES[3]) is None
    assert u.current("city") == u.sessions[3][1].memory and len(u.stale("city")) == 2
    today = make_user("ku-today-t0001", "today", random.Random(3))
    sloppy = make_user("ku-sloppy-s0001", "sloppy", random.Random(4))
    model = ScriptedModel([today, sloppy], seed=5)
    moved = today.sessions[1][2]
    [add] = ask(model, moved.turn, {"m1": today.sessions[0][0].memory})
    assert add["event"] == "ADD"  # today's extraction ignores what it is shown
    events = [
        ask(model, sloppy.sessions[1][2].turn, {"m1": sloppy.sessions[0][0].memory})[0]
        for _ in range(200)
    ]
    adds = sum(e["event"] == "ADD" for e in events)
    invented = sum(e.get("target") not in (None, "m1") for e in events)
    assert 30 <= adds <= 90 and 5 <= invented <= 45 and invented == model.invented
