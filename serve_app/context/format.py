"""The prompt block: important facts first, then memories, cut to a token budget.

Facts the LLM rated ``importance >= 0.5`` (a name, a diet, a standing instruction)
take the budget first; memories come next; less important facts only fill what
is left (they are shown with the other facts).

Items are added in priority order while they fit; an item that does not fit is
skipped (a shorter one after it may still fit). Only what made it into the
block is returned as JSON, so ``context``, ``facts`` and ``memories`` agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from serve_app.text import count_tokens, wrap_context

FACTS_HEADER = "Known facts about the user:"
MEMORIES_HEADER = "Relevant memories:"
FOOTER = "Use this context only where it is relevant to the conversation."
IMPORTANT_FACT = 0.5
_SCOPE_LABEL = {"agent": "agent knowledge", "org": "organisation knowledge", "session": "session"}


def fact_line(f: dict[str, Any]) -> str:
    return f"- {f['category']}.{f['key']}: {f['value']}"


def memory_line(m: dict[str, Any]) -> str:
    label = m["type"].upper()
    scope = _SCOPE_LABEL.get(m.get("scope") or "user")
    prefix = f"[{label}, {scope}]" if scope else f"[{label}]"
    content = " ".join(str(m["content"]).split())
    return f"- {prefix} {content}"


@dataclass
class Block:
    text: str
    facts: list[dict[str, Any]] = field(default_factory=list)
    memories: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0


def _fit(
    items: Sequence[dict[str, Any]], line, header: str, budget: int
) -> tuple[list[dict[str, Any]], list[str], int]:
    kept: list[dict[str, Any]] = []
    lines: list[str] = []
    used = 0
    header_cost = count_tokens(header)
    for item in items:
        text = line(item)
        cost = count_tokens(text) + (header_cost if not kept else 0)
        if used + cost > budget:
            continue
        kept.append(item)
        lines.append(text)
        used += cost
    return kept, ([header, *lines] if kept else []), used


def format_context(
    facts: Sequence[dict[str, Any]], memories: Sequence[dict[str, Any]], token_budget: int
) -> Block:
    """The wrapped block (empty string when nothing fits or nothing is known)."""
    overhead = count_tokens(wrap_context(FOOTER))
    budget = token_budget - overhead
    if budget <= 0 or (not facts and not memories):
        return Block("")
    ranked = sorted(facts, key=lambda f: -float(f.get("importance") or 0.0))  # stable
    major = [f for f in ranked if float(f.get("importance") or 0.0) >= IMPORTANT_FACT]
    minor = ranked[len(major) :]
    kept_facts, _, used = _fit(major, fact_line, FACTS_HEADER, budget)
    kept_mems, mem_lines, used_m = _fit(memories, memory_line, MEMORIES_HEADER, budget - used)
    if minor:
        left = budget - used - used_m + (count_tokens(FACTS_HEADER) if kept_facts else 0)
        kept_minor, _, _ = _fit(minor, fact_line, FACTS_HEADER, left)
        kept_facts += kept_minor
    fact_lines = [FACTS_HEADER, *map(fact_line, kept_facts)] if kept_facts else []
    if not kept_facts and not kept_mems:
        return Block("")
    body = "\n".join([*fact_lines, *mem_lines, FOOTER])
    text = wrap_context(body)
    return Block(text, kept_facts, kept_mems, count_tokens(text))
