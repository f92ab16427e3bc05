"""Sentences and per-person parts of a message (issue 29): abbreviations, initials and
decimals do not end a sentence; a question about two people is searched for each."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from serve_app.context.parts import per_person, sentences, split_parts
from tests.serve_app.context.test_levers import Backend, build, mem


def test_abbreviations_do_not_end_a_sentence():
    assert sentences("Dr. Smith said I should rest. What should I eat?") == [
        "Dr. Smith said I should rest.",
        "What should I eat?",
    ]
    text = (
        "Mr. and Mrs. Lee met Ms. Park on St. Mary's Road. She likes fruit, e.g. apples,"
        " i.e. the sweet ones. We meet at 9 a.m. tomorrow and 5 p.m. on Friday. It costs"
        " 3.50 dollars. J. R. R. Tolkien wrote it."
    )
    assert sentences(text) == [
        "Mr. and Mrs. Lee met Ms. Park on St. Mary's Road.",
        "She likes fruit, e.g. apples, i.e. the sweet ones.",
        "We meet at 9 a.m. tomorrow and 5 p.m. on Friday.",
        "It costs 3.50 dollars.",
        "J. R. R. Tolkien wrote it.",
    ]


def test_etc_and_am_pm_end_a_sentence_before_a_capital():
    assert sentences("I buy apples, pears, etc. Then I cook.") == [
        "I buy apples, pears, etc.",
        "Then I cook.",
    ]
    assert sentences("It opens at 9 a.m. What should I bring?") == [
        "It opens at 9 a.m.",
        "What should I bring?",
    ]
    assert sentences("Apples, pears, etc. are fine") == ["Apples, pears, etc. are fine"]
    assert sentences("Bring snacks, drinks, etc.") == ["Bring snacks, drinks, etc."]


def test_a_question_about_two_people_is_searched_for_each():
    assert split_parts("What do Anna and Ben like?", 6) == [
        "What do Anna and Ben like?",
        "What do Anna like?",
        "What do Ben like?",
    ]
    assert per_person("Gift ideas for Anna, Ben, and Carla?") == [
        "Gift ideas for Anna?",
        "Gift ideas for Ben?",
        "Gift ideas for Carla?",
    ]
    assert per_person("Plan a party for Anna's and Ben's birthdays") == [
        "Plan a party for Anna's birthdays",
        "Plan a party for Ben's birthdays",
    ]
    assert per_person("What movies have both Joanna and Nate seen?") == [
        "What movies have Joanna seen?",
        "What movies have Nate seen?",
    ]
    # one person, "I", or nobody: nothing more to search
    assert per_person("What does Anna like?") == []
    assert per_person("Anna and I went hiking") == []
    assert per_person("salt and pepper") == []
    assert per_person("Is the NASA and ESA launch today?") == []


def test_the_builder_finds_both_peoples_memories():
    anna = mem("Anna loves dark chocolate", 0.62, 0.9)
    ben = mem("Ben collects vinyl records", 0.58, 0.9)
    msg = "What do Anna and Ben like?"
    b = Backend(
        by_text={
            msg: [dict(anna, similarity=0.4)],
            "What do Anna like?": [anna],
            "What do Ben like?": [ben],
        }
    )
    r = build(b, msg)
    assert len(b.calls) == 1 and len(b.calls[0]) == 3  # one backend call, three texts
    assert {m["content"] for m in r.memories} == {anna["content"], ben["content"]}


WORD = st.sampled_from(["apples", "rest", "the", "park", "3.5", "example.com", "it's"])
ABBREV = st.sampled_from(
    [
        "Dr. Smith",
        "Mr. Lee",
        "Mrs. Park",
        "Ms. Ode",
        "St. Louis",
        "e.g. pears",
        "i.e. figs",
        "9 a.m. sharp",
        "5 p.m. today",
        "J. K. Rowling",
        "apples, etc. and",
    ]
)


@st.composite
def sentence(draw) -> str:
    words = draw(st.lists(st.one_of(WORD, ABBREV), min_size=1, max_size=8))
    return "Then " + " ".join(words) + draw(st.sampled_from([".", "?", "!"]))


@given(st.lists(sentence(), min_size=1, max_size=6))
def test_sentences_round_trip(sents):
    """Sentences made with abbreviations, initials and decimals inside come back whole."""
    assert sentences(" ".join(sents)) == sents


@given(st.text(max_size=400))
def test_parts_are_bounded_and_never_empty(text):
    parts = split_parts(text, 6)
    assert 1 <= len(parts) <= 6 and parts[0] == text
    assert all(p.strip() for p in parts[1:])


def test_long_messages_with_many_dots_and_names_stay_linear():
    """A dot scan looks back over its own word only: a huge word before a dot, or a
    long list of names, is read once (this finishes at once; quadratic would not)."""
    assert len(sentences("a" * 200_000 + ". b")) == 2
    names = ", ".join(f"Name{chr(97 + i % 26)}x" for i in range(20_000)) + " and Zed"
    assert len(split_parts(f"Gifts for {names}?", 6)) == 6
    # one text per person, at most ``limit`` of them: the output stays linear too
    assert len(per_person(f"Gifts for {names} " + "and a long tail " * 20_000, 6)) == 6
    assert sentences("No. What about Sunday?") == ["No.", "What about Sunday?"]
