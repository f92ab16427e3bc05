"""Lenient parsing, strict validation of LLM answers."""

from __future__ import annotations

import json

import pytest

from serve_app.extraction.parser import (
    BadOutput,
    load_json_object,
    parse_extraction,
    parse_summary,
)

GOOD = {
    "memories": [
        {
            "type": "preference",
            "content": "The user prefers Python",
            "importance": 0.8,
            "confidence": 0.9,
            "tags": ["lang"],
        }
    ],
    "facts": [{"category": "identity", "key": "Name", "value": "Alex", "confidence": 1.0}],
}


def test_plain_object():
    ex = parse_extraction(json.dumps(GOOD))
    assert [m.content for m in ex.memories] == ["The user prefers Python"]
    assert ex.facts[0].key == "name" and ex.facts[0].value == "Alex"


def test_code_fence_and_prose_around():
    text = "Here you go:\n```json\n" + json.dumps(GOOD) + "\n```\nHope this helps {not json}"
    assert parse_extraction(text).memories[0].type == "preference"
    text = "Sure! " + json.dumps(GOOD) + ' -- done. {"x": 1}'
    assert len(parse_extraction(text).facts) == 1


def test_truncated_answer_keeps_complete_items():
    full = json.dumps(
        {"memories": [GOOD["memories"][0], {"type": "fact", "content": "The user lives in Porto"}]}
    )
    cut = full[: full.index("lives in") + 5]  # stops inside the second memory
    ex = parse_extraction(cut)
    assert [m.content for m in ex.memories] == ["The user prefers Python"]


def test_invalid_items_dropped_not_fatal():
    raw = {
        "memories": [
            {"type": "gossip", "content": "x"},  # unknown type
            {"type": "fact", "content": "   "},  # empty
            {"type": "fact", "content": "ok fact", "importance": 7},  # out of range
            {"type": "FACT", "content": "The user owns a cat"},
        ],
        "facts": [{"category": "mood", "key": "k", "value": "v"}, "nonsense"],
    }
    ex = parse_extraction(json.dumps(raw))
    assert [m.content for m in ex.memories] == ["The user owns a cat"]
    assert ex.facts == [] and ex.dropped == 5


@pytest.mark.parametrize(
    "text",
    ["", "no json here", "{memories: [oops", '{"other": 1}', "[1, 2]"],
)
def test_unusable_answers_raise(text):
    with pytest.raises(BadOutput):
        parse_extraction(text)


def test_summary():
    assert parse_summary('```{"summary": "The user planned a trip."}```') == (
        "The user planned a trip."
    )
    with pytest.raises(BadOutput):
        parse_summary('{"summary": ""}')


def test_nested_braces_in_strings():
    obj = load_json_object('x {"summary": "a {b} c \\" }"} y')
    assert obj["summary"] == 'a {b} c " }'


@pytest.mark.parametrize(
    "answer",
    [
        '{"memories": ' + "[" * 3000 + "]" * 3000 + "}",  # complete, ~3000 deep
        '{"memories": ' + "[" * 3000,  # truncated: the repair closes 3000 brackets
        '{"memories": [' + '{"a": ' * 1500 + "1" + "}" * 1500 + "]}",
        "```json\n" + "[" * 5000 + "\n```",
    ],
)
def test_an_answer_nested_too_deep_is_bad_output_not_a_recursion_error(answer):
    with pytest.raises(BadOutput, match="nested"):
        parse_extraction(answer)
    with pytest.raises(BadOutput):
        parse_summary(answer)


def test_ordinary_nesting_and_brackets_inside_strings_still_parse():
    deep_in_text = {"memories": [{"type": "fact", "content": "[" * 500 + "{" * 500}]}
    assert parse_extraction(json.dumps(deep_in_text)).memories[0].content.startswith("[[[")
    assert load_json_object(json.dumps({"a": [[[[{"b": [1]}]]]]})) == {"a": [[[[{"b": [1]}]]]]}
