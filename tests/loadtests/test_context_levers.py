"""The LoCoMo ceiling that context_levers prints beside the block: a perfect re-ranker."""

from __future__ import annotations

from loadtests.context_levers import perfect_rerank
from serve_app.text import count_tokens


def test_a_perfect_reranker_puts_the_evidence_first_and_stops_at_the_budget():
    rows = [{"content": f"turn {i} " + "word " * 20} for i in range(6)]
    dia = [f"D{i}" for i in range(6)]
    one = count_tokens(rows[0]["content"])
    # the evidence ranks last, and two turns fit: both evidence turns are shown
    assert perfect_rerank(rows, dia, {"D4", "D5"}, 2 * one) == 1.0
    # room for one: half of it
    assert perfect_rerank(rows, dia, {"D4", "D5"}, one) == 0.5
    # evidence the search did not return stays missing whatever the budget
    assert perfect_rerank(rows, dia, {"D1", "D9"}, 100 * one) == 0.5
