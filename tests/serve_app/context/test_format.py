"""The prompt block: facts first, memories after, within the token budget, wrapped."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from serve_app.context.builder import dedupe, owners_for, visible_in_session
from serve_app.context.format import format_context
from serve_app.text import CONTEXT_CLOSE, CONTEXT_OPEN, count_tokens, strip_context

NOW = datetime.now(UTC)


def fact(key: str, value: str, importance: float = 0.8) -> dict:
    return {
        "id": uuid.uuid4(),
        "category": "personal",
        "key": key,
        "value": value,
        "confidence": 1.0,
        "importance": importance,
        "updated_at": NOW,
    }


def memory(content: str, type: str = "semantic", scope: str = "user", **kw) -> dict:
    return {
        "id": kw.pop("id", uuid.uuid4()),
        "content": content,
        "type": type,
        "scope": scope,
        "session_id": kw.pop("session_id", None),
        "score": kw.pop("score", 0.5),
        **kw,
    }


def test_block_is_wrapped_facts_first():
    block = format_context(
        [fact("name", "Ada")], [memory("Prefers tea", "preference")], token_budget=500
    )
    assert block.text.startswith(CONTEXT_OPEN) and block.text.endswith(CONTEXT_CLOSE)
    assert block.text.index("personal.name: Ada") < block.text.index("[PREFERENCE] Prefers tea")
    assert strip_context(block.text) == ""  # extraction drops the whole block
    assert block.tokens == count_tokens(block.text) <= 500


def test_shared_scopes_are_labelled():
    block = format_context(
        [], [memory("Refunds take 5 days", scope="org"), memory("Be brief", scope="agent")], 500
    )
    assert "[SEMANTIC, organisation knowledge] Refunds take 5 days" in block.text
    assert "[SEMANTIC, agent knowledge] Be brief" in block.text


def test_budget_cuts_and_json_matches_text():
    mems = [memory(f"memory number {i} " + "word " * 30) for i in range(20)]
    block = format_context([fact("name", "Ada")], mems, token_budget=200)
    assert block.tokens <= 200
    assert 0 < len(block.memories) < 20
    for m in block.memories:
        assert f"memory number {mems.index(m)} " in block.text
    for m in mems:
        if m not in block.memories:
            assert f"memory number {mems.index(m)} " not in block.text


def test_a_long_item_is_skipped_but_shorter_ones_still_fit():
    mems = [memory("long " * 400), memory("short one")]
    block = format_context([], mems, token_budget=120)
    assert [m["content"] for m in block.memories] == ["short one"]


def test_nothing_known_or_no_budget_gives_empty_context():
    assert format_context([], [], 500).text == ""
    assert format_context([fact("name", "Ada")], [], 3).text == ""


def test_dedupe_by_id_text_and_near_duplicates():
    same_id = uuid.uuid4()
    mems = [
        memory("I live in Berlin", id=same_id),
        memory("I live in Berlin", id=same_id),
        memory("i live in berlin!"),
        memory("I live in Berlin Germany near the old town and the big river"),
        memory("I live in Berlin, Germany near the old town and the big river!!"),
        memory("My cat is called Tom"),
    ]
    kept = [m["content"] for m in dedupe(mems)]
    assert kept == [
        "I live in Berlin",
        "I live in Berlin Germany near the old town and the big river",
        "My cat is called Tom",
    ]


def test_other_sessions_memories_stay_out():
    assert visible_in_session(memory("x"), None)
    assert visible_in_session(memory("x", scope="session", session_id="s1"), "s1")
    assert not visible_in_session(memory("x", scope="session", session_id="s1"), "s2")
    assert not visible_in_session(memory("x", scope="session", session_id="s1"), None)


def test_owner_keys():
    assert owners_for("alice", None) == ("alice", "@org")
    assert owners_for("alice", "bot") == ("alice", "@agent:bot", "@org")


def test_token_estimate_over_counts():
    assert count_tokens("") == 0
    assert count_tokens("word " * 30) >= 30
    assert count_tokens("x" * 400) == 100
