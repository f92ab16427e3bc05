"""Lenient JSON parsing, strict validation of what the LLM answered.

Models wrap JSON in code fences, add prose around it, or stop mid-object when
they hit the token limit. We find the first JSON object, repair a truncated tail
when possible, then validate with pydantic and drop items that break the
contract instead of failing the whole answer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

MEMORY_TYPES = ("fact", "semantic", "preference", "procedural", "episodic", "insight")
FACT_CATEGORIES = ("identity", "preference", "constraint", "instruction")
MAX_CONTENT_CHARS = 2000
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
# NUL (PostgreSQL text cannot hold it) and the other C0 controls except tab/newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_TAG_CHARS = 64


def clean_text(value: str, limit: int) -> str:
    """An LLM-produced string made safe to store: no control characters, at most ``limit``."""
    return _CONTROL.sub("", value).strip()[:limit].strip()


class BadOutput(ValueError):
    """The LLM's answer holds no usable JSON object."""


class ExtractedMemory(BaseModel):
    type: Literal["fact", "semantic", "preference", "procedural", "episodic", "insight"]
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    tags: list[str] = Field(default_factory=list, max_length=16)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, v: Any) -> Any:
        return clean_text(v, MAX_CONTENT_CHARS) if isinstance(v, str) else v

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return []
        tags = (clean_text(t, MAX_TAG_CHARS) for t in v if isinstance(t, str))
        return list(dict.fromkeys(t for t in tags if t))[:16]


class ExtractedFact(BaseModel):
    category: Literal["identity", "preference", "constraint", "instruction"]
    key: str = Field(min_length=1, max_length=64)
    value: str = Field(min_length=1, max_length=500)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)  # context keeps >= 0.5 first

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("key", mode="before")
    @classmethod
    def _key(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        return re.sub(r"[^a-z0-9]+", "_", clean_text(v, 256).lower()).strip("_")[:64]

    @field_validator("value", mode="before")
    @classmethod
    def _value(cls, v: Any) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = str(v)
        return clean_text(v, 500) if isinstance(v, str) else v


class Extraction(BaseModel):
    memories: list[ExtractedMemory] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)
    dropped: int = 0  # items that broke the contract


def _structure(text: str, start: int = 0) -> tuple[list[tuple[int, str]], bool]:
    """(index, char) of every character outside JSON strings, and whether the text
    ends inside a string. Brackets and commas inside values never count as structure.
    """
    out: list[tuple[int, str]] = []
    in_str, esc = False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        out.append((i, c))
    return out, in_str


def _balanced_candidates(text: str) -> list[str]:
    """Substrings from each '{' to its matching '}' (string-aware), or to the end."""
    out = []
    start = text.find("{")
    while start != -1 and len(out) < 5:
        depth, end = 0, None
        for i, c in _structure(text, start)[0]:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    break
        out.append(text[start:end] if end else text[start:])
        if end is None:
            break
        start = text.find("{", end)
    return out


def _repair_truncated(fragment: str) -> Any:
    """Close a JSON object cut off mid-way; drop the incomplete last element."""
    cut_points: list[int] = []  # positions after a complete value inside a container
    for i, c in _structure(fragment)[0]:
        if c in "}]":
            cut_points.append(i + 1)
        elif c == ",":
            cut_points.append(i)
    for cut in reversed(cut_points):
        head = fragment[:cut].rstrip().rstrip(",")
        closers = _closers(head)
        if closers is None:
            continue
        try:
            return json.loads(head + closers)
        except json.JSONDecodeError:
            continue
    raise BadOutput("truncated JSON could not be repaired")


def _closers(text: str) -> str | None:
    """The brackets that close ``text``, or None if it cannot be closed."""
    stack: list[str] = []
    chars, in_string = _structure(text)
    for _, c in chars:
        if c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack:
                return None
            stack.pop()
    if in_string:
        return None
    return "".join(reversed(stack))


def load_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text`` (fences, prose and truncation tolerated)."""
    if not text or not text.strip():
        raise BadOutput("empty answer")
    sources = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for source in sources:
        try:
            value = json.loads(source)
            if isinstance(value, dict):
                return value
        except json.JSONDecodeError:
            pass
        for cand in _balanced_candidates(source):
            try:
                value = json.loads(cand)
            except json.JSONDecodeError:
                try:
                    value = _repair_truncated(cand)
                except BadOutput:
                    continue
            if isinstance(value, dict):
                return value
    raise BadOutput("no JSON object in the answer")


def _valid_items(raw: Any, model: type[BaseModel]) -> tuple[list[Any], int]:
    if not isinstance(raw, list):
        return [], (0 if raw is None else 1)
    items, dropped = [], 0
    for entry in raw:
        try:
            items.append(model.model_validate(entry))
        except ValidationError:
            dropped += 1
    return items, dropped


def parse_extraction(text: str) -> Extraction:
    """Validated memories and facts; raises :class:`BadOutput` when nothing is usable."""
    obj = load_json_object(text)
    if "memories" not in obj and "facts" not in obj:
        raise BadOutput("JSON object has neither 'memories' nor 'facts'")
    memories, d1 = _valid_items(obj.get("memories"), ExtractedMemory)
    facts, d2 = _valid_items(obj.get("facts"), ExtractedFact)
    return Extraction(memories=memories, facts=facts, dropped=d1 + d2)


def parse_summary(text: str) -> str:
    obj = load_json_object(text)
    summary = obj.get("summary")
    summary = clean_text(summary, MAX_CONTENT_CHARS) if isinstance(summary, str) else ""
    if not summary:
        raise BadOutput("JSON object has no 'summary' string")
    return summary
