"""Pre-filter (greetings) and query expansion (context prepend) of the context builder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.context.expand import expand_query, history_terms, key_terms
from serve_app.context.prefilter import is_greeting, is_self_contained


@pytest.mark.parametrize(
    "text", ["hi", "Hello!", "hey there", "thanks", "Thank you so much!", "bye", "ok", "Okay."]
)
def test_greetings_skip_search(text):
    assert is_greeting(text)


@pytest.mark.parametrize(
    "text", ["hi, what is my dog's name?", "thanks, and what about my flight?", "hello world app"]
)
def test_real_questions_are_not_greetings(text):
    assert not is_greeting(text)


@pytest.mark.parametrize("text", ["How much?", "what about the other one", "and that", "why?"])
def test_vague_follow_ups(text):
    assert not is_self_contained(text)


def test_self_contained_question():
    assert is_self_contained("What is the budget for my Hawaii vacation?")


def test_key_terms_drop_stopwords_and_repeats():
    assert key_terms("I am planning a vacation to Hawaii, Hawaii sounds nice") == [
        "planning",
        "vacation",
        "hawaii",
    ]


def test_vague_query_gets_recent_user_terms():
    history = [
        ("user", "Planning a vacation"),
        ("assistant", "Where would you like to go? Maybe Paris"),
        ("user", "Hawaii sounds nice"),
    ]
    expanded = expand_query("How much?", history)
    assert expanded.startswith("How much? ")
    assert "hawaii" in expanded and "vacation" in expanded
    assert "paris" not in expanded  # assistant messages are not the user's topic


def test_self_contained_query_is_unchanged():
    history = [("user", "Planning a Hawaii vacation")]
    q = "What is the budget for my Hawaii vacation?"
    assert expand_query(q, history) == q
    assert expand_query("How much?", []) == "How much?"


def test_history_terms_look_at_last_three_user_messages():
    history = [("user", f"topic{i} word{i}") for i in range(6)]
    terms = history_terms(history)
    assert "topic5" in terms and "topic3" in terms and "topic2" not in terms


@given(
    st.lists(
        st.sampled_from(
            [
                "good",
                "afternoon",
                "there",
                "thank",
                "you",
                "so",
                "much",
                "hi",
                "!",
                "?",
                ".",
                ",",
                " ",
                "see",
                "ya",
                "a",
                "lot",
                "okay",
            ]
        ),
        max_size=8,
    )
)
def test_the_length_shortcut_never_changes_the_answer(words):
    from serve_app.context.prefilter import _GREETINGS

    text = " ".join(words)
    lower = " ".join(text.lower().split())
    assert is_greeting(text) == any(p.match(lower) for p in _GREETINGS)
