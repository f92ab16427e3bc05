"""A tenant's extraction guidance in the prompt (mem0's custom_instructions, includes,
excludes and custom_categories).

The guidance goes after the extraction contract in the system prompt, so the
contract (and its marker line) stays first and the JSON shape never changes:
categories are asked for in each memory's ``tags``, and only the listed names are
kept (:meth:`ExtractionGuidance.pick`). A request's own ``custom_categories``
(``/mem0`` add, kept in the memories' metadata) replace the tenant's for that
request, as in mem0.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from serve_app.settings import Settings
from serve_app.tenancy import ExtractionGuidance, environment, resolve

# The tenant's guidance (the extractor reads it once per batch).
GuidanceFor = Callable[[str], Awaitable[ExtractionGuidance]]
META_CATEGORIES = "custom_categories"  # metadata key: the request's own categories


def from_env(settings: Settings) -> GuidanceFor:
    """Every tenant gets the environment's guidance (no tenant settings at hand)."""
    fixed = resolve({}, environment(settings)).guidance

    async def same(_: str) -> ExtractionGuidance:
        return fixed

    return same


def for_request(guidance: ExtractionGuidance, meta: Mapping[str, Any]) -> ExtractionGuidance:
    """The tenant's guidance with the request's own categories (its metadata's
    ``custom_categories``, validated by /mem0; anything malformed is ignored)."""
    own = (meta.get("metadata") or {}).get(META_CATEGORIES)
    if not isinstance(own, list):
        return guidance
    entries: Sequence[Mapping[str, str]] = [
        {k: v}
        for e in own
        if isinstance(e, dict)
        for k, v in e.items()
        if isinstance(k, str) and k.strip() and isinstance(v, str)
    ]
    if not entries:
        return guidance
    return replace(guidance, categories=ExtractionGuidance.categories_of(entries))


def guidance_prompt(g: ExtractionGuidance) -> str:
    """The section appended to the extraction system prompt ('' without guidance)."""
    parts = []
    if g.instructions.strip():
        parts.append("Instructions:\n" + g.instructions.strip())
    if g.includes.strip():
        parts.append("Pay particular attention to (keep these):\n" + g.includes.strip())
    if g.excludes.strip():
        parts.append("Never store (skip these even if they seem useful):\n" + g.excludes.strip())
    if g.categories:
        listed = "\n".join(
            f"- {name}: {what}" if what else f"- {name}" for name, what in g.categories
        )
        parts.append(
            'Categories: give each memory the names of the categories it belongs to in its "tags"'
            " (only these names, exactly as written; none if none fits):\n" + listed
        )
    if not parts:
        return ""
    return (
        "\n\nGuidance from the operator of this assistant (it refines what to keep; the"
        " JSON format above is unchanged):\n\n" + "\n\n".join(parts)
    )
