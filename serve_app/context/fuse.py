"""Fusing a message's part searches (issue 29): one row per memory, and the cosines
the evidence gate judges.

A memory found by several parts keeps its best score and its best cosine to any part
(``best_similarity``). With the gate's ``time_free`` lever the parts with time words
are searched once more without them (:func:`serve_app.context.evidence.without_time`),
and :func:`topic_cosines` gives each memory its best cosine to the time-free texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serve_app.context.evidence import without_time


def probes_of(texts: Sequence[str]) -> dict[str, str]:
    """text -> the text without its time words, for the texts that have some."""
    out = {}
    for t in texts:
        bare = without_time(t)
        if bare is not None:
            out[t] = bare
    return out


def topic_cosines(batches: Sequence[Sequence[dict[str, Any]]], time_free: Sequence[bool]) -> dict:
    """id -> the best cosine among the time-free searches (probes, texts without time
    words): what the message's topic, not its when-words, says about each memory."""
    best: dict[str, float] = {}
    for batch, free in zip(batches, time_free, strict=True):
        if not free:
            continue
        for m in batch:
            if m.get("similarity") is None:
                continue
            key = str(m["id"])
            best[key] = max(best.get(key, -1.0), float(m["similarity"]))
    return best


def fuse(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per memory: its best score, and its best cosine to any part."""
    best: dict[str, dict[str, Any]] = {}
    sims: dict[str, float] = {}
    for m in found:
        key = str(m["id"])
        sim = float(m["similarity"]) if m.get("similarity") is not None else -1.0
        sims[key] = max(sims.get(key, -1.0), sim)
        if key not in best or float(m.get("score") or 0) > float(best[key].get("score") or 0):
            best[key] = m
    out = []
    for key, m in best.items():
        m = dict(m)
        m["best_similarity"] = m["similarity"] = sims[key]  # the response shows the best
        out.append(m)
    return out
