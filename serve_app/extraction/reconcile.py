"""Reconcile on write: extraction reads the owner's live memories before it writes.

Without this, "I moved to Berlin" became a new memory next to "The user lives in
Paris" and the context block contradicted itself. Before the extraction call the
pipeline gathers what the owner already has that the new turns may touch: per user
turn the ``k`` nearest live memories (exact scan over the owner's own vectors, the
dedup lookup of :class:`MemoryIndex`) plus the best full-text matches (the
retriever's lexical search), deduplicated, and the owner's most important active
facts. They go into the same extraction prompt under short local aliases (``m1``,
``f1``; never database ids), bounded by count and tokens. The model answers each
memory with an event (ADD, UPDATE, INVALIDATE, NOOP) and a target alias; this module
maps aliases back. An alias that was not shown is ignored and counted (``unknown``);
one naming a row that is not the owner's is ignored and counted (``foreign``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from psycopg_pool import AsyncConnectionPool

from serve_app.extraction.turn import Turn
from serve_app.retrieval.pgvector_search import PgVectorSearch
from serve_app.retrieval.query import SearchQuery
from serve_app.settings import Settings
from serve_app.store.documents import CHUNK_TYPE
from serve_app.store.facts import FactStore
from serve_app.store.memory_index import MemoryIndex
from serve_app.store.records import Owner
from serve_app.store.validation import MEMORY_TYPES
from serve_app.text import count_tokens

# What reconcile may show the LLM as known memories: every type but a document's chunk.
_MEMORY_TYPES = tuple(sorted(MEMORY_TYPES - {CHUNK_TYPE}))

KNOWN_HEADER = "Known about this user (refer to these only by alias):"

RECONCILE_RULES = """
Known memories: after the conversation, "Known about this user" lists what is stored,
by alias (m1.. memories, f1.. facts). Give each memory an "event" against them:
ADD (default): new information. UPDATE: known memory "target" is no longer accurate;
"content" is the full new statement. INVALIDATE: "target" stopped being true and
nothing replaces it (a cancelled plan); no content. NOOP: "target" already says it.
Add a short "reason" to UPDATE/INVALIDATE and "turns": the [n] it comes from. Use only
listed aliases. A fact changes by writing its key with the new value."""


@dataclass(frozen=True)
class Shown:
    """One row shown to the model: what its alias stands for, as it was read."""

    alias: str
    kind: str  # memory | fact
    id: uuid.UUID
    content: str
    version: int = 0  # memories: the row version the model saw (stale -> conflict)
    user_id: str | None = None
    category: str = ""  # facts
    key: str = ""


@dataclass
class Known:
    """What one batch's prompt showed, by alias (empty: the prompt is today's)."""

    owner: Owner
    items: dict[str, Shown] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.items)

    def block(self) -> str:
        """The lines appended to the user prompt ("" when nothing is known)."""
        if not self.items:
            return ""
        return "\n\n" + KNOWN_HEADER + "\n" + "\n".join(_line(s) for s in self.items.values())

    def resolve(self, target: str | None) -> tuple[Shown | None, str | None]:
        """(row, None) for a shown alias of the owner's; (None, why) otherwise."""
        if not target:
            return None, "missing"
        shown = self.items.get(target.strip().lower())
        if shown is None:
            return None, "unknown"
        if shown.user_id is not None and shown.user_id != self.owner.user_id:
            return None, "foreign"  # never expected: the gather reads the owner's rows only
        return shown, None


def _line(s: Shown) -> str:
    if s.kind == "fact":
        return f"{s.alias}: {s.category}/{s.key} = {s.content}"
    return f"{s.alias}: {s.content}"


@dataclass(frozen=True)
class Limits:
    per_turn: int = 5  # nearest memories per user turn (dense), and lexical matches
    max_memories: int = 12  # shown in one prompt after deduplication
    max_facts: int = 8
    max_tokens: int = 400  # the known block's budget
    min_similarity: float = 0.2  # weaker dense neighbours are not worth their tokens


class Gatherer:
    """Reads what a batch's prompt shows: the owner's nearest live memories and facts."""

    def __init__(self, index: MemoryIndex, search: PgVectorSearch, facts: FactStore) -> None:
        self.index = index
        self.search = search
        self.facts = facts

    async def gather(
        self, owner: Owner, texts: Sequence[str], vectors: np.ndarray, limits: Limits
    ) -> Known:
        """Aliases m1.. for the best-matching memories (by their best score over the
        turns), f1.. for the most important facts, within ``limits``."""
        assert owner.user_id is not None
        best: dict[uuid.UUID, tuple[float, str, int]] = {}
        for text, vector in zip(texts, vectors, strict=True):
            for m in await self.index.nearest(owner, vector, limits.per_turn):
                if m.similarity >= limits.min_similarity:
                    _keep(best, m.id, m.similarity, m.content, m.version)
            for row in await self._lexical(owner, text, vector, limits.per_turn):
                _keep(best, row["id"], float(row["similarity"]), row["content"], row["version"])
        known = Known(owner)
        used = count_tokens(KNOWN_HEADER)
        ranked = sorted(best.items(), key=lambda kv: -kv[1][0])[: limits.max_memories]
        for n, (mid, (_, content, version)) in enumerate(ranked, 1):
            shown = Shown(f"m{n}", "memory", mid, content, version, owner.user_id)
            used += count_tokens(_line(shown)) + 1
            if used > limits.max_tokens:
                break
            known.items[shown.alias] = shown
        facts = await self.facts.active(owner.tenant_id, owner.user_id, limits.max_facts)
        for n, f in enumerate(facts, 1):
            shown = Shown(
                f"f{n}", "fact", f["id"], f["value"], 0, owner.user_id, f["category"], f["key"]
            )
            used += count_tokens(_line(shown)) + 1
            if used > limits.max_tokens:
                break
            known.items[shown.alias] = shown
        return known

    async def _lexical(self, owner: Owner, text: str, vector: np.ndarray, k: int) -> list[dict]:
        """The retriever's full-text search over the owner's live memories (OR of lexemes).

        Memory types only: the user's own document chunks are knowledge, never a memory
        the LLM may update or delete (the dense side, ``MemoryIndex``, skips them too)."""
        assert owner.user_id is not None
        q = SearchQuery(
            tenant_id=owner.tenant_id,
            user_id=owner.user_id,
            top_k=k,
            text=text,
            types=_MEMORY_TYPES,
        )
        probe = await self.search.probe(q, count_cap=0, want_terms=True, allowed_cap=0)
        if not probe.terms:
            return []
        return await self.search.lexical(q, vector, probe.terms, k)


def _keep(
    best: dict[uuid.UUID, tuple[float, str, int]],
    mid: uuid.UUID,
    score: float,
    content: str,
    version: int,
) -> None:
    if mid not in best or best[mid][0] < score:
        best[mid] = (score, content, version)


class Reconciler:
    """The pipeline's entry: what a batch's prompt shows, and the prompt parts for it."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        model_slug: str,
        index: MemoryIndex,
        embed: Callable[..., Awaitable[np.ndarray]],
        settings: Settings,
    ) -> None:
        s = settings.extract
        self.enabled = s.reconcile
        self.embed = embed
        self.limits = Limits(
            s.reconcile_per_turn,
            s.reconcile_max_memories,
            s.reconcile_max_facts,
            s.reconcile_max_tokens,
            s.reconcile_min_similarity,
        )
        search = PgVectorSearch(pool, model_slug, settings.retrieval.hnsw_ef_search)
        self.gatherer = Gatherer(index, search, FactStore(pool))

    async def known(self, owner: Owner, turns: Sequence[Turn]) -> Known:
        """The owner's rows the batch's user turns may touch (empty when off)."""
        texts = [t.content for t in turns if t.role == "user"]
        if not self.enabled or not texts or owner.user_id is None:
            return Known(owner)
        vectors = await self.embed(texts, is_query=True)
        return await self.gatherer.gather(owner, texts, vectors, self.limits)


def prompt_parts(known: Known) -> tuple[str, str]:
    """(system prompt suffix, user prompt suffix): both empty when nothing is known, so
    an owner without memories gets today's prompt, token for token."""
    if not known:
        return "", ""
    return "\n" + RECONCILE_RULES, known.block()
