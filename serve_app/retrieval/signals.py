"""Per-memory signals beyond text similarity: named entities, referenced time, session.

Built once when an owner is loaded into the hot cache (from the rows it loads) and
kept in the cache entry next to its vectors and BM25 postings:

- entities: proper nouns of each memory (:func:`serve_app.text.entity_candidates`),
  as postings name -> rows, so a query naming "Caroline" or "Becoming Nicole" scores
  every memory naming it in one lookup, weighted by rarity (idf);
- referenced time: the day a memory talks about, from its event time ``valid_from``,
  ``metadata.session_date`` (when it was said) or the created time, shifted by a
  relative expression in the text ("last year", "two weeks ago"), see
  :mod:`serve_app.retrieval.temporal`;
- session group: ``session_id``, else ``metadata.session_date``'s day; memories of
  unrelated documents have none, so nothing groups them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serve_app.retrieval.temporal import (
    TimeIntent,
    in_period,
    mentions_time,
    referenced_day,
    said_day,
    time_scores,
)
from serve_app.text import entity_candidates


@dataclass
class EntityIndex:
    """name -> rows naming it; idf per name; the names of each row."""

    n: int
    postings: dict[str, np.ndarray] = field(default_factory=dict)
    names: list[tuple[str, ...]] = field(default_factory=list)

    @classmethod
    def build(cls, texts: Sequence[str]) -> EntityIndex:
        per_row = [entity_candidates(t) for t in texts]
        confirmed = {name for row in per_row for name, initial in row if not initial}
        rows: dict[str, list[int]] = {}
        names: list[tuple[str, ...]] = []
        for i, row in enumerate(per_row):
            kept = tuple(name for name, initial in row if not initial or name in confirmed)
            names.append(kept)
            for name in kept:
                rows.setdefault(name, []).append(i)
        postings = {k: np.asarray(v, dtype=np.int32) for k, v in rows.items()}
        return cls(n=len(texts), postings=postings, names=names)

    def idf(self, name: str) -> float:
        hit = self.postings.get(name)
        return float(np.log(1.0 + self.n / len(hit))) if hit is not None else 0.0

    def query_names(self, text: str) -> list[str]:
        """The query's entities this owner knows (a sentence-initial one too, if known)."""
        return [name for name, _ in entity_candidates(text) if name in self.postings]

    def scores(self, names: Iterable[str], rare_only: bool = False) -> np.ndarray:
        """Summed idf of the names each row holds over the idf of a one-row name, at most 1.

        A name in half the rows (a chat's speaker) adds little, a rare one nearly 1:
        the signal is about *which* thing is named, not who is talking.
        ``rare_only``: only names in at most 5% of rows (and at least 2).
        """
        out = np.zeros(self.n, dtype=np.float32)
        for name in set(names):
            hit = self.postings.get(name)
            if hit is None or (rare_only and len(hit) > max(2, 0.05 * self.n)):
                continue
            out[hit] += self.idf(name)
        full = float(np.log(1.0 + self.n)) if self.n else 1.0
        return np.minimum(out / full, 1.0)

    def nbytes(self) -> int:
        return int(sum(p.nbytes + 100 for p in self.postings.values()) + 60 * self.n)


@dataclass
class MemorySignals:
    """Everything above for one owner, row-aligned with its cache entry."""

    entities: EntityIndex
    said: np.ndarray  # day (days since epoch) each memory was said/written
    referenced: np.ndarray  # day each memory refers to (said, shifted by "last year" ...)
    timed: np.ndarray  # bool: the text itself mentions a time
    groups: np.ndarray  # int32 session group, -1: none

    @classmethod
    def build(cls, rows: Sequence[dict[str, Any]]) -> MemorySignals:
        texts = [r.get("content") or "" for r in rows]
        said = np.asarray([said_day(r) for r in rows], dtype=np.float64)
        referenced = np.asarray(
            [referenced_day(t, d) for t, d in zip(texts, said, strict=True)], dtype=np.float64
        )
        keys: dict[str, int] = {}
        groups = np.full(len(rows), -1, dtype=np.int32)
        for i, r in enumerate(rows):
            key = session_key(r)
            if key is not None:
                groups[i] = keys.setdefault(key, len(keys))
        return cls(
            entities=EntityIndex.build(texts),
            said=said,
            referenced=referenced,
            timed=np.asarray([mentions_time(t) for t in texts], dtype=bool),
            groups=groups,
        )

    def nbytes(self) -> int:
        return self.entities.nbytes() + len(self.said) * 21


def session_key(row: dict[str, Any]) -> str | None:
    """The conversation a memory came from: its session, else the day its session was held."""
    if row.get("session_id"):
        return f"s:{row['session_id']}"
    when = (row.get("metadata") or {}).get("session_date")
    return f"d:{str(when)[:10]}" if isinstance(when, str) and when else None


@dataclass
class Segment:
    """One owner's part of a fused score array: its signals and which of its rows, where."""

    signals: MemorySignals | None
    rows: np.ndarray  # the owner's rows, in the order of the score array
    start: int  # offset in the score array
    query_names: tuple[str, ...] = ()


def direct_scores(
    seg: Segment,
    intent: TimeIntent,
    entity_weight: float,
    time_weight: float,
    period_weight: float = 0.0,
) -> np.ndarray:
    """entity_weight x idf share of the query's names + time_weight x time fit, per row,
    + period_weight for a memory said or referring to a day in the period the question
    names ("last week": the question tells when, so it weighs more than a hint)."""
    out = np.zeros(len(seg.rows), dtype=np.float32)
    sig = seg.signals
    if sig is None:
        return out
    if entity_weight and seg.query_names:
        out += entity_weight * sig.entities.scores(seg.query_names)[seg.rows]
    if time_weight and intent:
        t = time_scores(intent, sig.said[seg.rows], sig.referenced[seg.rows], sig.timed[seg.rows])
        out += time_weight * t
    if period_weight and intent.period is not None:
        inside = in_period(intent.period, sig.said[seg.rows], sig.referenced[seg.rows])
        out += period_weight * inside
    return out


def expand(
    s: np.ndarray, segments: Sequence[Segment], seeds: int, entity_w: float, session_w: float
) -> np.ndarray:
    """``s`` plus a bonus for memories related to the best ``seeds`` hits.

    Multi-hop questions ("What has Melanie painted?") have answers in several places;
    the best hit names things the question does not (a rare entity: "Luna", "Matt
    Patterson") or belongs to a session whose other memories continue it. A memory
    sharing a seed's rare entities gets ``entity_w`` x their idf share, one of its
    session ``session_w``; the best bonus over the seeds counts, seeds keep their score.
    """
    n = len(s)
    if n == 0 or seeds <= 0 or (entity_w <= 0 and session_w <= 0):
        return s
    k = min(seeds, n)
    top = np.argpartition(-s, k - 1)[:k]
    bonus = np.zeros(n, dtype=np.float32)
    for g in top:
        seg = next(x for x in segments if x.start <= g < x.start + len(x.rows))
        sig = seg.signals
        if sig is None:
            continue
        r = int(seg.rows[g - seg.start])
        part = slice(seg.start, seg.start + len(seg.rows))
        bridge = set(sig.entities.names[r]) - set(seg.query_names)
        if entity_w > 0 and bridge:
            got = entity_w * sig.entities.scores(bridge, rare_only=True)[seg.rows]
            bonus[part] = np.maximum(bonus[part], got)
        if session_w > 0 and sig.groups[r] >= 0:
            same = session_w * (sig.groups[seg.rows] == sig.groups[r])
            bonus[part] = np.maximum(bonus[part], same)
    bonus[top] = 0
    return s + bonus


def mmr(order: np.ndarray, rel: np.ndarray, vectors: np.ndarray, penalty: float) -> np.ndarray:
    """``order`` re-ranked by maximal marginal relevance (rel - penalty x max cosine before).

    ``rel``: relevance of each item of ``order`` (0..1); ``vectors``: their unit vectors.
    A multi-hop question's second answer is rarely a paraphrase of the first; near
    copies of a better hit step back so other memories reach the top-k.
    """
    n = len(order)
    if penalty <= 0 or n < 3:
        return order
    sims = vectors @ vectors.T
    chosen = [0]
    closest = sims[0].copy()
    left = np.ones(n, dtype=bool)
    left[0] = False
    while left.any():
        gain = np.where(left, rel - penalty * closest, -np.inf)
        i = int(np.argmax(gain))
        chosen.append(i)
        left[i] = False
        closest = np.maximum(closest, sims[i])
    return order[np.asarray(chosen)]
