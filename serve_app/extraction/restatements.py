"""Assistant sentences that restate what the user's memories already say are dropped
before extraction, so the model does not re-extract (or misattribute) known facts.

A sentence goes when it matches a recent memory's normal form (:func:`restates`) or its
embedding is within ``restatement_similarity`` of one of the owner's memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from serve_app.extraction.junk import normal_forms, restates
from serve_app.extraction.turn import Turn
from serve_app.store import Owner
from serve_app.store.memory_index import MemoryIndex
from serve_app.text import sentences

__all__ = ["Embed", "drop_restatements"]


class Embed(Protocol):
    """The encoder's embed call (the pipeline's too)."""

    async def __call__(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray: ...


async def drop_restatements(
    index: MemoryIndex, embed: Embed, threshold: float, owner: Owner, turns: list[Turn]
) -> tuple[list[Turn], int]:
    """Remove assistant sentences that restate memories the user already has; returns the
    turns left (emptied ones dropped) and how many sentences went."""
    pieces = [(i, sentences(t.content)) for i, t in enumerate(turns) if t.role == "assistant"]
    if not pieces:
        return turns, 0
    known = await index.recent_contents(owner)
    flat = [s for _, ss in pieces for s in ss]
    if not flat or not known:
        return turns, 0
    vectors = await embed(flat, is_query=False)
    forms = normal_forms(known)
    junk = {s for s in flat if restates(s, forms)}
    rest = [i for i, s in enumerate(flat) if s not in junk]
    best = await index.best_similarities(owner, [vectors[i] for i in rest])
    junk.update(
        flat[i] for i, sim in zip(rest, best, strict=True) if sim is not None and sim >= threshold
    )
    if not junk:
        return turns, 0
    out = list(turns)
    for i, ss in pieces:
        kept = [s for s in ss if s not in junk]
        out[i] = replace(turns[i], content=" ".join(kept))
    return [t for t in out if t.content], len(junk)
