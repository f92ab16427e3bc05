"""Context blocks put the facts the LLM rated important (>= 0.5) first."""

from __future__ import annotations

from serve_app.context.format import format_context


def fact(key: str, importance: float, value: str = "x") -> dict:
    return {"category": "identity", "key": key, "value": value, "importance": importance}


def mem(i: int) -> dict:
    return {
        "id": f"m{i}",
        "type": "fact",
        "scope": "user",
        "session_id": None,
        "content": f"The user mentioned detail number {i} about their garden",
    }


def test_important_facts_win_the_budget_over_memories_and_minor_facts():
    facts = [
        fact("trivia", 0.1, "likes trivia"),
        fact("name", 0.9, "Ada"),
        fact("diet", 0.6, "vegan"),
    ]
    block = format_context(facts, [mem(i) for i in range(10)], token_budget=150)
    keys = [f["key"] for f in block.facts]
    assert keys[:2] == ["name", "diet"] and "trivia" not in keys
    assert block.memories  # memories come next, minor facts only fill what is left
    assert block.text.index("identity.name") < block.text.index("identity.diet")
    roomy = format_context(facts, [mem(1)], token_budget=1000)
    assert [f["key"] for f in roomy.facts] == ["name", "diet", "trivia"]
