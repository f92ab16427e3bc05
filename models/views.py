"""Views of a text: its vector pooled over some of its tokens, from the text's own run.

A context search asks for a message and for the same message without some words (issue
29's time-free cosine: "Suggest a dinner menu for guests on Saturday" without "on
Saturday"). With mean pooling (MiniLM, BGE's sentence-transformers export) the second
vector can be the mean over the first run's token vectors with those words' tokens
left out: one encoder run, two poolings, instead of a second text to encode (each
padded token costs ~0.2 ms of CPU on this box). :meth:`models.encoder.Encoder.
encode_views` uses these helpers; a view is given as character spans of the text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Character ranges ``(start, end)`` of a text that make one view of it.
Spans = tuple[tuple[int, int], ...]


def pool_views(hidden: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Masked means of token vectors: ``weights`` (batch, views, tokens) of 0/1 over
    ``hidden`` (batch, tokens, dim) -> (batch, views, dim). A view's mean over a subset
    of a text's tokens, from the same run (mean pooling only)."""
    if hidden.ndim != 3 or weights.ndim != 3:
        raise ValueError(f"expected 3-d hidden states and weights, got {hidden.shape}")
    w = weights.astype(np.float32)
    summed = np.matmul(w, hidden.astype(np.float32, copy=False))
    return summed / np.clip(w.sum(axis=2, keepdims=True), 1e-9, None)


def view_weights(
    offsets: Sequence[tuple[int, int]], special: Sequence[int], views: Sequence[Spans], shift: int
) -> np.ndarray:
    """(1 + len(views), tokens) pooling weights of one tokenized text: row 0 every token;
    then per view the tokens whose characters overlap one of its spans, plus the special
    tokens and the query prefix (``shift`` characters before the text), which every
    vector of the model pools. Linear in tokens x spans."""
    n = len(offsets)
    out = np.zeros((1 + len(views), n), dtype=np.float32)
    out[0] = 1.0
    for row, spans in enumerate(views, start=1):
        for t, ((a, b), sp) in enumerate(zip(offsets, special, strict=True)):
            if sp or b <= shift or any(a - shift < e and b - shift > s for s, e in spans):
                out[row, t] = 1.0
    return out


def view_text(text: str, spans: Spans) -> str:
    """A view as a text of its own (what a backend that cannot pool a view encodes)."""
    return " ".join(text[s:e].strip() for s, e in spans if text[s:e].strip())
