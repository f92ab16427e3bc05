"""Lexical scoring: BM25 over a cached owner's documents, using PostgreSQL's lexemes.

Documents and queries are tokenised by PostgreSQL (``to_tsvector('english', ...)``:
stemming and stop words), so the hot path (BM25 here) and the cold path (full-text
search with an OR tsquery) agree on what a term is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

_LEXEME = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")


def parse_tsvector(text: str | None) -> dict[str, int]:
    """``'word':1,5 'other':3`` -> {"word": 2, "other": 1} (term frequencies)."""
    out: dict[str, int] = {}
    if not text:
        return out
    for m in _LEXEME.finditer(text):
        term = m.group(1).replace("''", "'")
        out[term] = len(m.group(2).split(",")) if m.group(2) else 1
    return out


def or_tsquery(terms: Iterable[str]) -> str:
    """An OR tsquery over already-normalised lexemes (cast with ``::tsquery``, no re-stemming)."""
    quoted = ["'" + t.replace("'", "''") + "'" for t in sorted(set(terms)) if t]
    return " | ".join(quoted)


class BM25:
    """Okapi BM25 over one owner's documents (postings as numpy arrays)."""

    def __init__(self, docs: Sequence[dict[str, int]], k1: float, b: float) -> None:
        self.k1, self.b = k1, b
        self.n = len(docs)
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float32)
        avgdl = float(lengths.mean()) if self.n and lengths.sum() > 0 else 1.0
        self.norm = (k1 * (1 - b + b * lengths / avgdl)).astype(np.float32)
        rows: dict[str, tuple[list[int], list[int]]] = {}
        for i, d in enumerate(docs):
            for term, tf in d.items():
                pos, tfs = rows.setdefault(term, ([], []))
                pos.append(i)
                tfs.append(tf)
        self.postings = {
            t: (np.asarray(p, dtype=np.int32), np.asarray(f, dtype=np.float32))
            for t, (p, f) in rows.items()
        }

    def nbytes(self) -> int:
        per_term = 100  # dict entry, key string and array headers, roughly
        return int(
            self.norm.nbytes
            + sum(p.nbytes + f.nbytes + per_term for p, f in self.postings.values())
        )

    def scores(self, terms: Iterable[str]) -> np.ndarray:
        """BM25 score of every document for the query terms (0 where none matches)."""
        out = np.zeros(self.n, dtype=np.float32)
        for t in set(terms):
            hit = self.postings.get(t)
            if hit is None:
                continue
            pos, tf = hit
            idf = np.log(1.0 + (self.n - len(pos) + 0.5) / (len(pos) + 0.5))
            out[pos] += idf * tf * (self.k1 + 1) / (tf + self.norm[pos])
        return out

    def top(
        self, terms: Iterable[str], k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """(row, score) of the best ``k`` matching rows, optionally only ``allowed`` rows."""
        s = self.scores(terms)
        if allowed is not None:
            mask = np.zeros(self.n, dtype=bool)
            mask[allowed] = True
            s = np.where(mask, s, 0.0)
        hits = np.flatnonzero(s > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-s[hits], k - 1)[:k]]
        hits = hits[np.argsort(-s[hits], kind="stable")]
        return [(int(i), float(s[i])) for i in hits]
