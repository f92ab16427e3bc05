"""Strict response formats, generated from the pydantic models that validate the answers.

An OpenAI-compatible endpoint given ``response_format: {"type": "json_schema", "strict":
true}`` constrains its decoding to the schema (OpenAI, llama.cpp's grammars, vLLM,
Ollama >= 0.5), so a small model can no longer echo the contract, wrap it in prose or
drop a bracket. The schema is derived from the same models the parser validates with, so
the two cannot drift apart.

Strict mode takes a subset of JSON Schema: every object lists all its properties as
required and allows no others, and ``$ref`` is not understood by every server. So the
models' schema is rewritten: references inlined, every property required (an optional
one stays optional by being nullable), no additional properties, and only the keywords
every constrained decoder understands (types, enums, items, properties). Lengths and
ranges are left to the pydantic validation that follows: a grammar for ``maxLength:
2000`` is large and gains nothing the validator does not already enforce.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

# What a constrained decoder is asked to honour; everything else is validated afterwards,
# and the prompt already says what each field means (descriptions would cost tokens twice).
_KEPT = ("type", "enum", "const")


@dataclass(frozen=True)
class ResponseSchema:
    """A named strict schema for ``response_format`` (``name``: letters, digits, _ and -)."""

    name: str
    schema: dict[str, Any]

    def response_format(self) -> dict[str, Any]:
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "strict": True, "schema": self.schema},
        }


def strict_schema(name: str, model: type[BaseModel], omit: Collection[str] = ()) -> ResponseSchema:
    """``model``'s JSON schema in strict form; ``omit``: properties (of any object in it)
    the prompt does not ask for, left to their defaults by the validator."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return ResponseSchema(name, _strict(raw, defs, frozenset(omit)))


def _strict(node: dict[str, Any], defs: dict[str, Any], omit: frozenset[str]) -> dict[str, Any]:
    if "$ref" in node:
        return _strict(defs[node["$ref"].rsplit("/", 1)[-1]], defs, omit)
    if "anyOf" in node:
        return {"anyOf": [_strict(option, defs, omit) for option in node["anyOf"]]}
    out = {k: node[k] for k in _KEPT if k in node}
    if node.get("type") == "array" and "items" in node:
        out["items"] = _strict(node["items"], defs, omit)
    if node.get("type") == "object" or "properties" in node:
        props = {
            key: _strict(value, defs, omit)
            for key, value in node.get("properties", {}).items()
            if key not in omit
        }
        out.update(type="object", properties=props, required=list(props))
        out["additionalProperties"] = False
    return out
