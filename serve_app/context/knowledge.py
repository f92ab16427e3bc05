"""The knowledge base in search results and context blocks: citations, and the
"From the knowledge base" section under the block's one token budget.

A document's chunks are ``memory_items`` rows of type ``document_chunk`` whose ``data``
says where they come from. Search results and context items that are chunks carry a
``citation`` (document id, title, chunk index, heading path, source URL); the block
cites each chunk by a short label, ``[Title › Section]``.

How the budget is split (one budget, as before):

1. the personal part first: the profile (within its share), then facts and memories,
   exactly as without a knowledge base, but within ``budget - reserve``;
2. ``reserve`` is what the admitted chunks need, at most ``knowledge_share`` of the
   budget (so personal knowledge always keeps at least ``1 - knowledge_share``);
3. the knowledge section then takes what the personal part left (its reserve, and more
   when the personal part was short), best chunk first; a chunk longer than
   ``chunk_tokens`` is shortened at a word boundary, so one long chunk cannot take the
   whole section.

Chunks enter the block only through the evidence gate (:mod:`serve_app.context.evidence`),
as memories do; their ``why`` says so, and names the document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from serve_app.context.format import FOOTER, Block, _fit
from serve_app.store.citations import CHUNK_TYPE
from serve_app.text import count_tokens, wrap_context

KNOWLEDGE_HEADER = "From the knowledge base:"
CITATION_FIELDS = ("document_id", "title", "chunk_index", "heading_path", "source_url", "version")
_SEP = " › "
_LABEL_CHARS = 80  # a citation label's title and section, each at most this long


def is_chunk(row: dict[str, Any]) -> bool:
    return row.get("type") == CHUNK_TYPE


def citation(data: dict[str, Any] | None) -> dict[str, Any]:
    """The provenance a chunk row's ``data`` holds, in the response's ``citation`` shape."""
    data = data or {}
    path = data.get("heading_path")
    return {
        "document_id": str(data.get("document_id") or ""),
        "title": data.get("title") or None,
        "chunk_index": int(data["chunk_index"]) if data.get("chunk_index") is not None else None,
        "heading_path": [str(h) for h in path] if isinstance(path, list) else [],
        "source_url": data.get("source_url") or None,
        "version": int(data["version"]) if data.get("version") is not None else None,
    }


def attach(rows: Sequence[dict[str, Any]], data: dict[Any, dict[str, Any]]) -> None:
    """Give every chunk row of ``rows`` its ``citation`` (``data``: id -> the row's data)."""
    for r in rows:
        if is_chunk(r):
            r["citation"] = citation(data.get(r["id"]))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def label(c: dict[str, Any]) -> str:
    """``[Title › Section]``: the title (or document id) and the nearest heading."""
    name = _clip(
        " ".join(str(c.get("title") or c.get("document_id") or "document").split()), _LABEL_CHARS
    )
    path = c.get("heading_path") or []
    if path:
        head = _clip(" ".join(str(path[-1]).split()), _LABEL_CHARS)
        if head and head != name:
            name = f"{name}{_SEP}{head}"
    return f"[{name}]"


def shorten(text: str, max_tokens: int) -> str:
    """``text`` cut at a word boundary to at most ``max_tokens`` (approx.), with an ellipsis."""
    words = text.split()
    if count_tokens(" ".join(words)) <= max_tokens:
        return " ".join(words)
    lo, hi = 0, len(words)  # the most words that fit: binary search, O(n log n) chars
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid]) + " …") <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + " …" if lo else ""


def chunk_line(c: dict[str, Any], chunk_tokens: int) -> str:
    cite = label(c.get("citation") or {})
    body = shorten(str(c["content"]), max(chunk_tokens - count_tokens(cite) - 1, 1))
    return f"- {cite} {body}".rstrip()


@dataclass
class KnowledgeBlock:
    """The block with its knowledge section; ``block`` as without knowledge otherwise."""

    block: Block
    chunks: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0  # of the knowledge section (header included)


def reserve(
    chunks: Sequence[dict[str, Any]], token_budget: int, share: float, chunk_tokens: int
) -> int:
    """Tokens the admitted chunks need, at most ``share`` of the budget (0: none)."""
    if not chunks:
        return 0
    _, _, used = _fit(
        chunks, lambda c: chunk_line(c, chunk_tokens), KNOWLEDGE_HEADER, int(token_budget * share)
    )
    return used


def with_knowledge(
    personal: Block, chunks: Sequence[dict[str, Any]], token_budget: int, chunk_tokens: int
) -> KnowledgeBlock:
    """``personal`` (built within ``budget - reserve``) plus the chunks that fit in what
    it left, inserted before the footer; the whole block stays within ``token_budget``."""
    if not chunks:
        return KnowledgeBlock(personal)
    base = personal.text or wrap_context(FOOTER)
    room = token_budget - count_tokens(base)
    line = lambda c: chunk_line(c, chunk_tokens)  # noqa: E731
    kept, lines, _ = _fit(chunks, line, KNOWLEDGE_HEADER, room)
    while kept:
        head, _, tail = base.rpartition(FOOTER)
        text = head + "\n".join([*lines, FOOTER]) + tail
        if count_tokens(text) <= token_budget:  # per-line estimates round up: check the whole
            block = Block(text, personal.facts, personal.memories, count_tokens(text))
            return KnowledgeBlock(block, kept, count_tokens("\n".join(lines)))
        kept, lines = kept[:-1], lines[:-1]  # bounded: at most len(chunks) rounds
        if not kept:
            break
    return KnowledgeBlock(personal)
