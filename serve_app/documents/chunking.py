"""A document's blocks into chunks of at most the embedding model's tokens.

Sizes come from the active model: ``min(chunk_tokens, max_tokens - 2)`` tokens per
chunk (the two are the model's [CLS]/[SEP]), so a chunk is never truncated by the
Embedder; the seed design's 512/50 where the model allows (bge-small), 254/50 for
MiniLM's 256. Tokens are counted with the model's own tokenizer (``tokenizers``).

Heading-aware: a chunk never spans two sections (runs of blocks under the same heading
path), so its ``heading_path`` is exact. Paragraph-aware: a chunk ends at a block
boundary when one lies in the second half of its window, else mid-block at a token.
Consecutive chunks of a section share ``overlap`` tokens. Linear in the text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from serve_app.documents.parse import Block, DocumentRefused, Parsed

__all__ = ["Chunk", "ChunkSizes", "chunk", "load_tokenizer", "sizes_for"]


@dataclass(frozen=True)
class ChunkSizes:
    tokens: int  # at most this many tokens of text per chunk
    overlap: int  # tokens shared with the previous chunk of the same section
    max_chars: int = 8000  # and at most this many characters (the memory content limit)


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    char_start: int
    char_end: int
    heading_path: tuple[str, ...]
    tokens: int


def sizes_for(model_max_tokens: int, chunk_tokens: int, overlap: int, max_chars: int) -> ChunkSizes:
    """The chunk sizes the model allows: the setting, capped by the model's window."""
    tokens = max(8, min(chunk_tokens, model_max_tokens - 2))
    return ChunkSizes(tokens, min(overlap, tokens // 4), max_chars)


@lru_cache(maxsize=4)
def load_tokenizer(model_ref: str, models_dir: Path | None = None) -> Any:
    """The model's tokenizer (the same ``tokenizer.json`` the Encoder loads, sha-checked by
    :mod:`models.resolve`), without truncation or padding; one per process and model."""
    from tokenizers import Tokenizer

    from models.resolve import get_spec, resolve_tokenizer

    spec = get_spec(model_ref, models_dir)
    tokenizer = Tokenizer.from_file(str(resolve_tokenizer(spec, models_dir=models_dir)))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _sections(blocks: Sequence[Block]) -> Iterator[list[Block]]:
    run: list[Block] = []
    for b in blocks:
        if run and b.heading_path != run[-1].heading_path:
            yield run
            run = []
        run.append(b)
    if run:
        yield run


def _spans(
    text: str, blocks: Sequence[Block], tokenizer: Any, piece: int
) -> tuple[list[tuple[int, int]], set[int]]:
    """Token character spans of a section (absolute offsets), and the token indexes
    where a block starts. A token longer than ``piece`` characters (a long word the
    tokenizer maps to one [UNK]) is cut into pieces so no chunk outgrows the char cap."""
    spans: list[tuple[int, int]] = []
    starts: set[int] = set()
    encodings = tokenizer.encode_batch(
        [text[b.start : b.end] for b in blocks], add_special_tokens=False
    )
    for b, enc in zip(blocks, encodings, strict=True):
        starts.add(len(spans))
        for s, e in enc.offsets:
            if e <= s:
                continue
            s, e = b.start + s, b.start + e
            while e - s > piece:
                spans.append((s, s + piece))
                s += piece
            spans.append((s, e))
    return spans, starts


def _joined(spans: list[tuple[int, int]], i: int) -> bool:
    """Token ``i`` continues the word of token ``i - 1`` (no gap between them)."""
    return 0 < i < len(spans) and spans[i][0] == spans[i - 1][1]


def chunk(parsed: Parsed, tokenizer: Any, sizes: ChunkSizes, max_chunks: int) -> list[Chunk]:
    """Chunks of ``parsed`` in document order; more than ``max_chunks`` is a 413."""
    out: list[Chunk] = []
    text = parsed.text
    for section in _sections(parsed.blocks):
        spans, starts = _spans(text, section, tokenizer, max(1, sizes.max_chars // 4))
        n = len(spans)
        begin = 0
        while begin < n:
            end = min(n, begin + sizes.tokens)
            if end < n:  # prefer a paragraph boundary in the window's second half
                floor = begin + max(1, sizes.tokens // 2)
                for b in range(end, floor - 1, -1):
                    if b in starts:
                        end = b
                        break
            while end - begin > 1 and spans[end - 1][1] - spans[begin][0] > sizes.max_chars:
                end -= 1
            if end < n and end not in starts:  # a cut inside a word moves to its start
                cut = end
                while cut - begin > 1 and end - cut < 32 and _joined(spans, cut):
                    cut -= 1
                if not _joined(spans, cut):
                    end = cut
            c_start, c_end = spans[begin][0], spans[end - 1][1]
            out.append(
                Chunk(
                    len(out),
                    text[c_start:c_end],
                    c_start,
                    c_end,
                    section[0].heading_path,
                    end - begin,
                )
            )
            if len(out) > max_chunks:
                raise DocumentRefused(413, f"the document makes more than {max_chunks} chunks")
            if end >= n:
                break
            nxt = max(begin + 1, end - sizes.overlap)
            while nxt < end and _joined(spans, nxt):  # overlap starts at a word
                nxt += 1
            begin = nxt
    return out
