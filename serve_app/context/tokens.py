"""Token counting for the context budget.

A cheap approximation instead of a tokenizer round trip: the embedder lives in
another deployment, and the prompt goes to an unknown upstream model anyway.
English text averages about 4 characters or 0.75 words per BPE/WordPiece token;
taking the larger of ``chars / 4`` and ``words * 4 / 3`` over-counts rather than
under-counts, so a block that fits the estimate fits the real budget.
"""

from __future__ import annotations

import math


def count_tokens(text: str) -> int:
    if not text:
        return 0
    return max(math.ceil(len(text) / 4), math.ceil(len(text.split()) * 4 / 3))
