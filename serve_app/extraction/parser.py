"""Lenient JSON parsing, strict validation of what the LLM answered.

Models wrap JSON in code fences, add prose around it, or stop mid-object when
they hit the token limit. We find the first JSON object, repair a truncated tail
when possible, then validate with pydantic and drop items that break the
contract instead of failing the whole answer.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import cache
from typing import Any, Literal

import re2
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from serve_app.extraction.dates import parse_when
from serve_app.llm.answer_schema import ResponseSchema, strict_schema

MEMORY_TYPES = ("fact", "semantic", "preference", "procedural", "episodic", "insight")
FACT_CATEGORIES = ("identity", "preference", "constraint", "instruction")
MAX_CONTENT_CHARS = 2000
_FENCE = re2.compile(r"(?is)```(?:json)?\s*(.*?)```")  # lazy to the end: RE2, linear
# NUL (PostgreSQL text cannot hold it) and the other C0 controls except tab/newline.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_TAG_CHARS = 64
MAX_REASON_CHARS = 300
# An answer's brackets nested deeper than this are refused before ``json.loads`` (the
# contract needs 4 levels; CPython's decoder raises RecursionError near 1000, which would
# escape every ``except BadOutput`` and re-send the batch to the LLM for ever).
MAX_JSON_DEPTH = 32
# Reconcile events (serve_app/extraction/reconcile.py); mem0's names are accepted too.
EVENTS = ("ADD", "UPDATE", "INVALIDATE", "NOOP")
_EVENT_SYNONYMS = {"DELETE": "INVALIDATE", "NONE": "NOOP"}


def clean_text(value: str, limit: int) -> str:
    """An LLM-produced string made safe to store: no control characters, at most ``limit``."""
    return _CONTROL.sub("", value).strip()[:limit].strip()


def event_time(value: Any) -> datetime | None:
    """A model-given date (``valid_from``) or None: ISO 8601 or a common written form
    ("Thu 2026-04-02", "April 2, 2026": :mod:`serve_app.extraction.dates`), naive read as
    UTC, years 1900..now+10. Anything else ("last Tuesday") is dropped, not fatal: the
    memory then takes its source turn's date."""
    return parse_when(value)


PROFILE_CLASSES = ("instruction", "constraint", "identity")


def about_alias(value: Any) -> str | None:
    """A speaker alias as the model wrote it (``"s1"``, ``"me"``), cleaned; else None."""
    return clean_text(value, 64).lower() or None if isinstance(value, str) else None


class BadOutput(ValueError):
    """The LLM's answer holds no usable JSON object."""


class ExtractedMemory(BaseModel):
    type: Literal["fact", "semantic", "preference", "procedural", "episodic", "insight"]
    content: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    tags: list[str] = Field(default_factory=list, max_length=16)
    # When it became true, if the conversation says (else: its source turn's date).
    valid_from: datetime | None = None
    # Reconcile (only when the prompt listed known memories): what to do with them.
    event: Literal["ADD", "UPDATE", "INVALIDATE", "NOOP"] = "ADD"
    target: str | None = Field(default=None, max_length=64)  # a shown alias (m1, f2)
    reason: str = Field(default="", max_length=MAX_REASON_CHARS)
    turns: list[int] = Field(default_factory=list, max_length=64)  # source turn indexes
    # Whom it is about, in a conversation of several speakers (an alias the prompt
    # listed: serve_app/extraction/speakers.py); None: the session's user.
    about: str | None = Field(default=None, max_length=64)
    # Profile class, "class" in the JSON: instruction | constraint | identity;
    # "" when the model says none; None when it says nothing (older prompts, other
    # models): the store's classifier decides then.
    profile_class: str | None = Field(default=None, validation_alias="class")

    @model_validator(mode="before")
    @classmethod
    def _target_only(cls, v: Any) -> Any:
        """An INVALIDATE/NOOP item may omit ``type`` (it writes no new memory)."""
        if isinstance(v, dict) and "type" not in v:
            event = cls._event(v.get("event"))
            if event in ("INVALIDATE", "NOOP"):
                return {**v, "type": "fact"}
        return v

    @field_validator("event", mode="before")
    @classmethod
    def _event(cls, v: Any) -> Any:
        if v is None:
            return "ADD"
        if isinstance(v, str):
            v = v.strip().upper()
            return _EVENT_SYNONYMS.get(v, v)
        return v

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        return clean_text(v, 64) or None if isinstance(v, str) else None

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, v: Any) -> Any:
        return clean_text(v, MAX_REASON_CHARS) if isinstance(v, str) else ""

    @field_validator("turns", mode="before")
    @classmethod
    def _turns(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return []
        return [int(t) for t in v if isinstance(t, int) and not isinstance(t, bool)][:64]

    @model_validator(mode="after")
    def _needs_content(self) -> ExtractedMemory:
        """ADD and UPDATE write ``content``; INVALIDATE and NOOP only name a target."""
        if self.event in ("ADD", "UPDATE") and not self.content:
            raise ValueError(f"{self.event} needs content")
        if self.event in ("INVALIDATE", "NOOP") and not self.target:
            raise ValueError(f"{self.event} needs a target")
        return self

    _valid_from = field_validator("valid_from", mode="before")(event_time)

    _about = field_validator("about", mode="before")(about_alias)

    @field_validator("profile_class", mode="before")
    @classmethod
    def _profile_class(cls, v: Any) -> Any:
        if v is None:
            return None
        c = v.strip().lower() if isinstance(v, str) else ""
        return c if c in PROFILE_CLASSES else ""

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
    valid_from: datetime | None = None  # when this value became true (else: the turn's date)
    about: str | None = Field(default=None, max_length=64)  # as ExtractedMemory's

    _valid_from = field_validator("valid_from", mode="before")(event_time)
    _about = field_validator("about", mode="before")(about_alias)

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


class ExtractionAnswer(BaseModel):
    """The extraction prompt's JSON contract: what the model is asked to answer."""

    memories: list[ExtractedMemory] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)


class Extraction(ExtractionAnswer):
    dropped: int = 0  # items that broke the contract


class SummaryAnswer(BaseModel):
    """The summary prompts' JSON contract (episodic summaries and consolidation digests)."""

    summary: str

    @field_validator("summary", mode="before")
    @classmethod
    def _summary(cls, v: Any) -> Any:
        return clean_text(v, MAX_CONTENT_CHARS) if isinstance(v, str) else v


# The reconcile fields are asked for only when the prompt shows known memories
# (serve_app/extraction/reconcile.py), and "about" only when several people speak
# (serve_app/extraction/speakers.py); without them a strict decoder would make the model
# write an event for every new memory of an owner who has none.
RECONCILE_FIELDS = ("event", "target", "reason", "turns")
SPEAKER_FIELDS = ("about",)
SUMMARY_SCHEMA = strict_schema("memserve_summary", SummaryAnswer)


@cache
def extraction_schema(reconcile: bool, speakers: bool) -> ResponseSchema:
    """The extraction answer's strict schema for a prompt that shows known memories
    (``reconcile``) and several speakers (``speakers``), or not."""
    omit = (() if reconcile else RECONCILE_FIELDS) + (() if speakers else SPEAKER_FIELDS)
    name = (
        "memserve_" + ("reconcile" if reconcile else "extraction") + ("_group" if speakers else "")
    )
    return strict_schema(name, ExtractionAnswer, omit)


EXTRACTION_SCHEMA = extraction_schema(reconcile=False, speakers=False)
RECONCILE_SCHEMA = extraction_schema(reconcile=True, speakers=False)


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
            return _decode(head + closers)
        except json.JSONDecodeError:
            continue
    raise BadOutput("truncated JSON could not be repaired")


def _depth(text: str) -> int:
    """The deepest nesting of ``{``/``[`` outside JSON strings (one linear pass)."""
    depth = deepest = 0
    for _, c in _structure(text)[0]:
        if c in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "}]":
            depth = max(0, depth - 1)
    return deepest


def _decode(text: str) -> Any:
    """``json.loads``; a decoder that runs out of stack is a bad answer, not a crash."""
    try:
        return json.loads(text)
    except RecursionError:
        raise BadOutput("JSON nested too deeply") from None


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
    if _depth(text) > MAX_JSON_DEPTH:
        raise BadOutput(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    sources = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for source in sources:
        try:
            value = _decode(source)
            if isinstance(value, dict):
                return value
        except json.JSONDecodeError:
            pass
        for cand in _balanced_candidates(source):
            try:
                value = _decode(cand)
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
    try:
        summary = SummaryAnswer.model_validate(load_json_object(text)).summary
    except ValidationError:
        summary = ""
    if not summary:
        raise BadOutput("JSON object has no 'summary' string")
    return summary
