"""Prompts of consolidation; the first line is a marker (logs and the test LLM)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, field_validator

from serve_app.extraction.parser import MAX_CONTENT_CHARS, clean_text
from serve_app.llm.answer_schema import strict_schema

INSIGHT_MARKER = "[memserve:insight:v1]"
DIGEST_MARKER = "[memserve:digest:v1]"

INSIGHT_SYSTEM = f"""{INSIGHT_MARKER}
These memories about one user of a chat assistant are related. If together they
reveal a pattern, preference or goal that none of them states alone, write it as
one sentence in the third person ("The user ..."); otherwise answer an empty string.
importance: 0..1, how much this should shape future answers.
Answer with one JSON object and nothing else: {{"insight": "...", "importance": 0.0}}"""

DIGEST_SYSTEM = f"""{DIGEST_MARKER}
Summarise these old episodes of one user's conversations with an assistant into
2-5 sentences in the third person ("The user ..."), keeping concrete details
(names, numbers, dates) worth recalling. Do not add anything that was not said.
Answer with one JSON object and nothing else: {{"summary": "..."}}"""


class InsightAnswer(BaseModel):
    """The insight prompt's JSON contract; an empty ``insight``: no pattern found."""

    insight: str
    importance: float = 0.6

    @field_validator("insight", mode="before")
    @classmethod
    def _insight(cls, v: Any) -> Any:
        return clean_text(v, MAX_CONTENT_CHARS) if isinstance(v, str) else v

    @field_validator("importance", mode="before")
    @classmethod
    def _importance(cls, v: Any) -> Any:
        """A number out of 0..1 is clamped and anything else is the default: the
        importance only orders memories, it is no reason to drop an insight."""
        if isinstance(v, int | float) and not isinstance(v, bool):
            return min(1.0, max(0.0, float(v)))
        return 0.6


INSIGHT_SCHEMA = strict_schema("memserve_insight", InsightAnswer)


def memories_prompt(contents: Sequence[str]) -> str:
    return "Memories:\n" + "\n".join(f"- {c}" for c in contents)
