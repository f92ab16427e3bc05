"""Messages read part by part and the evidence gate of a context block (issue 29)."""

from __future__ import annotations

from serve_app.context.evidence import Evidence, stems
from serve_app.context.parts import clauses, is_small_talk, sentences, split_parts


def test_questions_and_sentences_are_parts():
    parts = split_parts("What city am I in? Any good bakeries around?", 6)
    assert parts == [
        "What city am I in? Any good bakeries around?",
        "What city am I in?",
        "Any good bakeries around?",
    ]


def test_a_single_sentence_is_one_part():
    assert split_parts("Can you suggest a recipe for dinner tonight?", 6) == [
        "Can you suggest a recipe for dinner tonight?"
    ]


def test_numbers_and_abbreviations_do_not_end_a_sentence():
    assert sentences("It costs 3.5 dollars at example.com today. Fine?") == [
        "It costs 3.5 dollars at example.com today.",
        "Fine?",
    ]


def test_clauses_split_on_joiners_between_long_sides():
    assert clauses("Suggest a dinner recipe for tonight, and also plan a weekend trip") == [
        "Suggest a dinner recipe for tonight",
        "also plan a weekend trip",
    ]
    assert clauses("salt and pepper") == ["salt and pepper"]


def test_parts_are_capped_and_greetings_dropped():
    msg = "Hi! " + " ".join(f"Question number {i} about topic{i}?" for i in range(10))
    parts = split_parts(msg, 4)
    assert len(parts) == 4 and parts[0] == msg and "Hi!" not in parts[1:]


def test_small_talk():
    assert is_small_talk("Thanks, that helps a lot!")
    assert is_small_talk("hi")
    assert not is_small_talk("Thanks! What city am I in?")


def test_long_message_splits_in_linear_time():
    msg = "word " * 50_000 + "? " + "and more " * 20_000
    assert len(split_parts(msg, 3)) <= 3


def test_evidence_needs_similarity_or_a_shared_word():
    ev = Evidence(strong=0.45, weak=0.25)
    message = stems("Any good bakeries around here?")
    assert ev.why(0.5, stems("Loves croissants"), message).startswith("similar")
    assert ev.why(0.3, stems("Favourite bakery is on Main Street"), message).startswith("shares")
    assert ev.why(0.3, stems("Lives in Oslo near the fjord"), message) is None
    assert ev.why(-0.001, stems("Lives in Oslo near the fjord"), message) is None
    assert ev.why(None, stems("bakery"), message) is None
