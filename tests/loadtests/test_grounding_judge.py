"""bench_grounding's judge: a stale value is found however an item names it (a real
model wrote "job = chef" the day the user became a teacher, which the workplace marker
alone missed), and a dropped item carrying the day's new value is a false drop."""

from __future__ import annotations

import random

from loadtests.grounding_judge import classify, new_in, paired, stale_in
from loadtests.knowledge_scenarios import JOBS, make_user


def test_a_job_is_stale_by_its_role_or_its_workplace_and_new_values_are_false_drops():
    u = make_user("kg-g001234", "good", random.Random(3))
    old_role, old_place = next(j for j in JOBS if j[0] in u.sessions[0][1].turn)
    new_role, _ = next(j for j in JOBS if j[0] in u.sessions[2][1].turn)
    assert stale_in(u, f"job = {old_role}", 2) == ["job"]
    assert stale_in(u, f"The user works at {old_place}-g001234", 2) == ["job"]
    assert stale_in(u, f"job = {old_role}", 1) == []  # still true then
    assert stale_in(u, f"The user went from {old_role} to {new_role}", 2) == []
    assert new_role in new_in(u, 2)["job"]
    assert classify(u, f"job = {new_role}", 2) == "false_drop"
    assert classify(u, f"job = {old_role}", 2) == "stale_drop"


def test_paired_differences_count_users_each_way():
    on = [{"m": 1}, {"m": 2}, {"m": 0}]
    off = [{"m": 2}, {"m": 2}, {"m": 0}]
    p = paired(on, off, "m")
    assert p["diffs_off_minus_on"] == [1, 0, 0] and p["off_higher"] == 1 and p["equal"] == 2
    assert p["mean"] == 0.333 and p["se"] == 0.333
