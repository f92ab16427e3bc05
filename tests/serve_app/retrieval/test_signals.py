"""Entity, time and session signals, and the expansion and MMR steps, on small arrays."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np

from serve_app.retrieval.signals import (
    EntityIndex,
    MemorySignals,
    Segment,
    direct_scores,
    expand,
    mmr,
    session_key,
)
from serve_app.retrieval.temporal import (
    day_number,
    referenced_day,
    said_day,
    time_intent,
    time_scores,
)

TEXTS = [
    "Caroline: I went to Paris last year.",
    "Melanie: Paris sounds lovely, did you see Luna?",
    "Caroline: Yes, Luna loved it.",
    "Melanie: I painted a sunset yesterday.",
]


def test_entity_index_scores_rare_names_higher_and_confirms_initial_words():
    idx = EntityIndex.build(TEXTS + ["Caroline: hello", "Melanie: hi, Caroline"])
    # "Caroline" starts most turns (a speaker), and one mid-sentence use confirms it
    assert idx.query_names("Where did Caroline see Luna?") == ["caroline", "luna"]
    assert EntityIndex.build(TEXTS).query_names("Did Caroline see Luna?") == ["luna"]
    s = idx.scores(["luna"])
    assert s[1] > 0 and s[2] > 0 and s[0] == 0
    assert idx.scores(["luna"])[1] > idx.scores(["caroline"])[0]  # rarer name, more weight
    assert "yes" not in idx.postings  # a sentence-initial word never seen mid-sentence


def test_time_intent_and_referenced_days():
    said = day_number(date(2023, 5, 8))
    # 2023-05-08 is a Monday: "last year" is 2022 (middle: July 2nd), "two weeks ago"
    # the week of April 24th (middle: the 27th).
    assert referenced_day("I went to Paris last year.", said) == day_number(date(2022, 7, 2))
    assert referenced_day("two weeks ago we met", said) == day_number(date(2023, 4, 27))
    assert referenced_day("I painted a sunset yesterday.", said) == said - 1
    assert referenced_day("nothing temporal", said) == said
    assert time_intent("When did Caroline go to Paris?").when
    assert time_intent("What did Melanie paint recently?").recent
    p = time_intent("What did Caroline do in May 2022?").period
    assert p == (day_number(date(2022, 5, 1)), day_number(date(2022, 5, 31)))
    assert not time_intent("What is Caroline's favourite colour?")


def test_said_day_prefers_session_date_metadata():
    created = datetime(2024, 1, 1, tzinfo=UTC)
    row = {"metadata": {"session_date": "2023-05-08T13:56:00"}, "created_at": created}
    assert said_day(row) == day_number(date(2023, 5, 8))
    assert said_day({"metadata": {}, "created_at": created}) == day_number(date(2024, 1, 1))
    assert session_key(row) == "d:2023-05-08"
    assert session_key({"session_id": "s1", "metadata": {}}) == "s:s1"
    assert session_key({"metadata": {}}) is None


def test_time_scores_follow_the_question():
    said = np.array([10.0, 20.0, 30.0])
    referenced = np.array([10.0, 19.0, 30.0])
    timed = np.array([False, True, False])
    assert list(time_scores(time_intent("When did it happen?"), said, referenced, timed)) == [
        0,
        1,
        0,
    ]
    recent = time_scores(time_intent("What happened recently?"), said, referenced, timed)
    assert recent[2] == 1 and recent[0] == 0


def _signals(days: list[str]) -> MemorySignals:
    rows = [
        {"content": t, "metadata": {"session_date": d}, "created_at": None}
        for t, d in zip(TEXTS, days, strict=True)
    ]
    return MemorySignals.build(rows)


def test_direct_scores_add_time_fit_for_a_when_question():
    sig = _signals(["2023-05-08"] * 2 + ["2023-06-01"] * 2)
    seg = Segment(sig, np.arange(4), 0, ())
    got = direct_scores(seg, time_intent("When did Melanie paint a sunset?"), 0.0, 1.0)
    assert got[3] == 1.0 and got[2] == 0.0  # only "yesterday" / "last year" mention time
    assert got[0] == 1.0


def test_expand_lends_to_the_best_hits_session_not_to_the_hits_themselves():
    sig = _signals(["2023-05-08"] * 2 + ["2023-06-01"] * 2)
    seg = Segment(sig, np.arange(4), 0, ())
    s = np.array([3.0, 0.0, 0.0, 0.0], dtype=np.float32)
    out = expand(s, [seg], seeds=1, entity_w=0.0, session_w=0.5)
    assert list(out) == [3.0, 0.5, 0.0, 0.0]
    assert list(expand(s, [seg], seeds=1, entity_w=0.0, session_w=0.0)) == list(s)


def test_mmr_moves_a_near_copy_of_the_best_hit_back():
    v = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    order = np.array([7, 8, 9])
    assert list(mmr(order, np.array([1.0, 0.9, 0.8]), v, 0.5)) == [7, 9, 8]
    assert list(mmr(order, np.array([1.0, 0.9, 0.8]), v, 0.0)) == [7, 8, 9]
