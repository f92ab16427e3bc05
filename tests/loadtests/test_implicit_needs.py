"""The foreign implicit-needs set as bench_context reads it: split by user, helpful keys
neither right nor wrong, figures per kind and half."""

from __future__ import annotations

from loadtests import implicit_needs
from loadtests.bench_context import score
from loadtests.context_metrics import Labels, outcome


def test_the_set_is_split_once_by_user():
    data = implicit_needs.load()
    halves: dict[str, set[str]] = {}
    for m in data["messages"]:
        halves.setdefault(m["user"], set()).add(m["half"])
    assert all(len(h) == 1 for h in halves.values())  # no user in both halves
    report = [m for m in data["messages"] if m["half"] == "held_out"]
    assert {m["user"] for m in report} == {f"u{i}" for i in range(16, 31)}
    assert len(report) == 194  # the report half the figures are on
    keys = {u["id"]: {m["key"] for m in u["memories"]} for u in data["users"]}
    for m in data["messages"]:
        assert set(m["needs"]) | set(m["helpful"]) <= keys[m["user"]], m
        assert m["kind"] in implicit_needs.KINDS
    typed = [m["type"] for u in data["users"] for m in u["memories"]]
    assert typed.count(None) > len(typed) // 3  # about half untyped: sent without a type


def test_a_helpful_key_counts_neither_as_found_nor_as_unneeded():
    lab = Labels({"1": "car", "2": "tennis", "3": "job"}, set())
    o = outcome(lab, ["car"], [], ["1", "2", "3"], helpful=["tennis"])
    assert o.got == {"car", "job"} and o.outside_profile == {"car", "job"}


def test_score_reports_each_half_and_kind():
    data = {
        "users": [{"id": "u01"}, {"id": "u20"}],
        "messages": [
            {"user": "u01", "text": "a", "needs": ["x"], "kind": "implicit", "half": "calibration"},
            {"user": "u20", "text": "b", "needs": ["y"], "kind": "none", "half": "held_out"},
        ],
    }
    labels = {("typed", "u01"): Labels({"1": "x"}), ("typed", "u20"): Labels({"2": "y"})}
    outs = [
        (0, "u01", outcome(labels[("typed", "u01")], ["x"], [], ["1"])),
        (1, "u20", outcome(labels[("typed", "u20")], ["y"], [], [])),
    ]
    s = score(outs, labels, "typed", data)
    assert s["calibration"]["needed_recall"] == 1.0 and s["held_out"]["needed_recall"] == 0.0
    assert s["by_kind"]["held_out"]["none"]["messages"] == 1
    assert s["by_kind"]["held_out"]["implicit"]["messages"] == 0
