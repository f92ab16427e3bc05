"""The block with a profile: the profile first, then facts and memories.

    About the user (always apply):
    - [INSTRUCTION] Always answer me in short bullet points
    - [CONSTRAINT] constraint.allergy: peanuts
    Known facts about the user:
    - preference.coffee: oat latte
    Relevant memories:
    - [FACT, user] Went to Lisbon in May

The profile takes at most ``profile_cap`` tokens (a share of the budget), most
important first (pinned, instructions, constraints, identity; then importance); what
is left goes to the facts and memories that passed the evidence gate, best first.
Every item carries ``why``: the reason it is in the block (explain, console).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serve_app.context.format import (
    FACTS_HEADER,
    FOOTER,
    MEMORIES_HEADER,
    Block,
    _fit,
    fact_line,
    memory_line,
)
from serve_app.profile.classify import PRIORITY
from serve_app.text import count_tokens, wrap_context

PROFILE_HEADER = "About the user (always apply):"


def profile_class(item: dict[str, Any]) -> str:
    return item.get("profile_class") or "pinned"


def profile_line(item: dict[str, Any]) -> str:
    label = profile_class(item).upper()
    if "category" in item:  # a fact
        return f"- [{label}] {item['category']}.{item['key']}: {item['value']}"
    return f"- [{label}] " + " ".join(str(item["content"]).split())


def profile_order(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pinned first, then instructions, constraints, identity; then importance."""
    return sorted(
        items,
        key=lambda i: (
            not i.get("pinned"),
            PRIORITY.get(profile_class(i), len(PRIORITY)),
            -float(i.get("importance") or 0.0),
        ),
    )


Fit = tuple[list[dict[str, Any]], list[str], int]  # (items kept, their lines, tokens)


def fit_profile(profile: Sequence[dict[str, Any]], token_budget: int, profile_cap: int) -> Fit:
    """The profile section's fit: most important first, within the cap and the budget
    (computed once per block: the builder takes the shown items out of the retrieved
    candidates and hands the same fit to :func:`format_with_profile`)."""
    budget = token_budget - count_tokens(wrap_context(FOOTER))
    if budget <= 0:
        return [], [], 0
    return _fit(profile_order(profile), profile_line, PROFILE_HEADER, min(profile_cap, budget))


def format_with_profile(
    profile: Sequence[dict[str, Any]],
    facts: Sequence[dict[str, Any]],
    memories: Sequence[dict[str, Any]],
    token_budget: int,
    profile_cap: int,
    fit: Fit | None = None,
) -> tuple[Block, list[dict[str, Any]], int]:
    """The block, the profile items that made it in, and their tokens (header included);
    ``fit``: :func:`fit_profile` of the same arguments, if the caller has it."""
    overhead = count_tokens(wrap_context(FOOTER))
    budget = token_budget - overhead
    if budget <= 0 or not (profile or facts or memories):
        return Block(""), [], 0
    kept_p, p_lines, used_p = fit or fit_profile(profile, token_budget, profile_cap)
    left = budget - used_p
    kept_f, f_lines, used_f = _fit(facts, fact_line, FACTS_HEADER, left)
    kept_m, m_lines, _ = _fit(memories, memory_line, MEMORIES_HEADER, left - used_f)
    if not (kept_p or kept_f or kept_m):
        return Block(""), [], 0
    text = wrap_context("\n".join([*p_lines, *f_lines, *m_lines, FOOTER]))
    facts_out = [i for i in kept_p if "category" in i] + kept_f
    mems_out = kept_m
    block = Block(text, facts_out, mems_out, count_tokens(text))
    return block, kept_p, used_p
