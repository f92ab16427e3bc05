"""Prompts of consolidation; the first line is a marker (logs and the test LLM)."""

from __future__ import annotations

from collections.abc import Sequence

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


def memories_prompt(contents: Sequence[str]) -> str:
    return "Memories:\n" + "\n".join(f"- {c}" for c in contents)
