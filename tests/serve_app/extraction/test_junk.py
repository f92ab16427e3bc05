"""Junk guard helpers: context blocks, system turns, restatement by containment."""

from __future__ import annotations

from serve_app.extraction.junk import (
    CONTEXT_CLOSE,
    CONTEXT_OPEN,
    Turn,
    clean_turns,
    contained,
    strip_context,
    wrap_context,
)


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
