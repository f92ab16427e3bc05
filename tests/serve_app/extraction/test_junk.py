"""Junk guard helpers: context blocks, system turns, restatement by containment."""

from __future__ import annotations

import pytest

from serve_app.extraction.junk import clean_turns, contained, normal_forms, restates
from serve_app.extraction.turn import Turn
from serve_app.text import CONTEXT_CLOSE, CONTEXT_OPEN, strip_context, wrap_context


def test_wrap_and_strip_roundtrip():
    block = wrap_context("- The user lives in Lisbon")
    assert block.startswith(CONTEXT_OPEN) and block.endswith(CONTEXT_CLOSE)
    assert strip_context(f"Hello {block} how are you?") == "Hello   how are you?".strip()
    assert "Lisbon" not in strip_context(f"a {block} b {block} c")


def test_unclosed_block_runs_to_end():
    assert strip_context(f"keep this {CONTEXT_OPEN} secret memories") == "keep this"


def test_clean_turns_drops_system_and_empty():
    turns = [
        Turn("system", "You are helpful. The user's name is Alex.", 1),
        Turn("user", wrap_context("memories"), 2),
        Turn("user", "I moved to Berlin", 3),
    ]
    assert [(t.role, t.content) for t in clean_turns(turns)] == [("user", "I moved to Berlin")]


def test_containment():
    memories = ["The user's favourite colour is blue", "cat"]
    assert contained("As you told me, the user's favourite colour is blue.", memories)
    assert not contained("I like green", memories)
    assert not contained("I have a cat named Tom", memories)  # short memories do not count


def test_restates_against_normal_forms_is_containment():
    memories = ["The user's favourite colour is blue!", "cat", "  THE USER HAS A DOG  "]
    forms = normal_forms(memories)
    assert forms == ["the user's favourite colour is blue", "the user has a dog"]
    for s in ["As you told me, the user's favourite colour is blue.", "I like green", "dog"]:
        assert restates(s, forms) == contained(s, memories)


@pytest.mark.timeout(10)  # the old pattern: ~2 min on this text
def test_many_unclosed_blocks_cost_linear_work():
    """``OPEN.*?CLOSE`` ran from every opening tag to the end of a text that never closes
    them (84 KB: 7 s); a scan finds each tag once."""
    text = "keep " + f"{CONTEXT_OPEN} x " * 15_000  # ~330 KB
    assert strip_context(text) == "keep"
    closed = f"a {CONTEXT_OPEN} x {CONTEXT_OPEN} y {CONTEXT_CLOSE} b {CONTEXT_CLOSE} c"
    assert strip_context(closed) == f"a   b {CONTEXT_CLOSE} c"  # the first close ends it
