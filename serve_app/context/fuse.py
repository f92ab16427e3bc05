"""Fusing a message's part searches: one row per memory, and the cosines
the evidence gate judges.

A memory found by several parts keeps its best score and its best cosine to any part
(``best_similarity``). With the gate's ``time_free`` lever the parts with time words
are searched once more without them (:func:`serve_app.context.evidence.without_time`),
and :func:`topic_cosines` gives each memory its best cosine to the time-free texts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from models.views import view_text
from serve_app.context.evidence import time_free_spans
from serve_app.text import normalize

Spans = tuple[tuple[int, int], ...]
_WORDS = re.compile(r"\w+")
NEAR_DUPLICATE_JACCARD = 0.9


def probe_spans(texts: Sequence[str]) -> dict[str, tuple[str, Spans]]:
    """text -> (the text without its time words, the character ranges of ``text`` it
    keeps), for the texts that have some (the time-free text as a view of ``text``)."""
    out = {}
    for t in texts:
        kept = time_free_spans(t)
        if kept is not None:
            out[t] = (view_text(t, kept), kept)
    return out


def part_views(texts: Sequence[str]) -> dict[str, tuple[str, Spans]]:
    """part -> (the message, the part's character range in it): the parts (after the
    first text, the message) that are a stretch of the message, so their vectors can be
    pooled from the message's encoder run (a part built by the splitter, such as one
    text per person, is not, and is encoded on its own)."""
    out: dict[str, tuple[str, Spans]] = {}
    if not texts:
        return out
    message = texts[0]
    for t in texts[1:]:
        at = message.find(t)
        if at >= 0 and t:
            out[t] = (message, ((at, at + len(t)),))
    return out


def shifted(view: tuple[str, Spans] | None, text: str, spans: Spans) -> tuple[str, Spans]:
    """``spans`` of ``text`` as spans of the source ``text`` is a view of (``view``;
    None: ``text`` is its own source)."""
    if view is None:
        return text, spans
    source, ((start, _),) = view
    return source, tuple((a + start, b + start) for a, b in spans)


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


_CACHED_CHARS = 512  # longer contents are keyed afresh: the cache holds short texts only


def _dedupe_key(content: str) -> tuple[str, frozenset[str]]:
    """A memory's normalised text and its words (asked on every call that finds it:
    short contents' keys are kept, a bounded cache of a pure function)."""
    return _cached_key(content) if len(content) <= _CACHED_CHARS else _key(content)


@lru_cache(maxsize=2048)
def _cached_key(content: str) -> tuple[str, frozenset[str]]:
    return _key(content)


def _key(content: str) -> tuple[str, frozenset[str]]:
    normal = normalize(content)
    return normal, frozenset(_WORDS.findall(normal))


def dedupe(memories: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the first (best) of memories with the same id, text, or nearly the same words."""
    kept: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    word_sets: list[frozenset[str]] = []
    for m in memories:
        mid = str(m["id"])
        text, words = _dedupe_key(m["content"])
        if mid in seen_ids or text in seen_text:
            continue
        if words and any(
            len(words & w) / len(words | w) >= NEAR_DUPLICATE_JACCARD for w in word_sets
        ):
            continue
        seen_ids.add(mid)
        seen_text.add(text)
        word_sets.append(words)
        kept.append(m)
    return kept
