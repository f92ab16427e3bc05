"""Strict response formats derived from the answer models: strict form, and agreement
between what the schema admits and what the parser validates."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from serve_app.consolidation.prompts import INSIGHT_SCHEMA
from serve_app.extraction.parser import (
    EXTRACTION_SCHEMA,
    RECONCILE_FIELDS,
    RECONCILE_SCHEMA,
    SUMMARY_SCHEMA,
    parse_extraction,
    parse_summary,
)
from serve_app.llm.answer_schema import ResponseSchema

ALL = [EXTRACTION_SCHEMA, RECONCILE_SCHEMA, SUMMARY_SCHEMA, INSIGHT_SCHEMA]


def objects(node: Any) -> list[dict[str, Any]]:
    """Every object schema in ``node`` (nested through items and anyOf)."""
    if isinstance(node, list):
        return [o for n in node for o in objects(n)]
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") == "object" else []
    return found + [o for v in node.values() for o in objects(v)]


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.name)
def test_every_object_is_closed_and_requires_all_its_properties(schema: ResponseSchema):
    found = objects(schema.schema)
    assert found, "no object in the schema"
    for obj in found:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    text = json.dumps(schema.schema)
    assert "$ref" not in text and "$defs" not in text  # not every decoder resolves them
    assert "maxLength" not in text and "default" not in text  # left to the validator
    jsonschema.Draft202012Validator.check_schema(schema.schema)


def test_reconcile_fields_only_in_the_reconcile_schema():
    plain = EXTRACTION_SCHEMA.schema["properties"]["memories"]["items"]["properties"]
    full = RECONCILE_SCHEMA.schema["properties"]["memories"]["items"]["properties"]
    assert not set(RECONCILE_FIELDS) & set(plain)
    assert set(RECONCILE_FIELDS) <= set(full)
    assert "class" in plain and "profile_class" not in plain  # the JSON name, not Python's
    assert full["event"]["enum"] == ["ADD", "UPDATE", "INVALIDATE", "NOOP"]


def test_response_format_is_openai_strict():
    fmt = SUMMARY_SCHEMA.response_format()
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["name"] == "memserve_summary"
    assert fmt["json_schema"]["schema"] == SUMMARY_SCHEMA.schema


def test_an_answer_the_schema_admits_is_valid_for_the_parser():
    """Nullable optional fields, every property present: what a constrained decoder
    writes passes validation whole (nothing dropped)."""
    answer = {
        "memories": [
            {
                "type": "fact",
                "content": "The user has two cats",
                "importance": 0.7,
                "confidence": 0.9,
                "tags": ["pets"],
                "valid_from": None,
                "class": None,
            },
            {
                "type": "episodic",
                "content": "The user moved to Lisbon",
                "importance": 0.5,
                "confidence": 0.8,
                "tags": [],
                "valid_from": "2024-03-01",
                "class": "identity",
            },
        ],
        "facts": [
            {
                "category": "identity",
                "key": "home",
                "value": "Lisbon",
                "confidence": 0.9,
                "importance": 0.8,
                "valid_from": None,
            }
        ],
    }
    jsonschema.validate(answer, EXTRACTION_SCHEMA.schema)
    parsed = parse_extraction(json.dumps(answer))
    assert parsed.dropped == 0
    assert [m.content for m in parsed.memories] == [
        "The user has two cats",
        "The user moved to Lisbon",
    ]
    assert parsed.memories[1].profile_class == "identity"
    assert parsed.facts[0].value == "Lisbon"
    summary = {"summary": "The user planned a trip."}
    jsonschema.validate(summary, SUMMARY_SCHEMA.schema)
    assert parse_summary(json.dumps(summary)) == "The user planned a trip."


def test_the_schema_refuses_what_the_parser_would_drop():
    bad = {"memories": [{"type": "opinion", "content": "x"}], "facts": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, EXTRACTION_SCHEMA.schema)
    assert parse_extraction(json.dumps(bad)).dropped == 1
