"""POST /v1/context without HTTP: facts + memories across scopes -> a prompt block.

Flow: facts (deterministic lookup) and, unless the message is a greeting, the
(expanded) query searched over the union of the user's, the agent's and the
organisation's memories, plus the current session's memories, in one backend call
that embeds the text once; results are merged, de-duplicated, and cut to the token budget.

The context levers (``Levers``, each on its own; all off: the block as before):
``profile``: the user's profile (instructions, constraints, identity: classes given at
write time, read with one indexed query) always first, within a share of the budget;
``split``: the message searched part by part (sentences, clauses) in the same backend
call, fused by each memory's best part; ``gate``: a retrieved memory or a fact outside
the profile enters only on evidence from this message (:mod:`serve_app.context.evidence`),
and small talk gets the profile only (or nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from typing import Any, Protocol

from serve_app.context import knowledge as kb
from serve_app.context.evidence import Evidence, stems
from serve_app.context.expand import expand_query
from serve_app.context.format import Block, format_context
from serve_app.context.fuse import (
    Spans,
    dedupe,
    fuse,
    part_views,
    probe_spans,
    shifted,
    topic_cosines,
)
from serve_app.context.left_out import LeftOut
from serve_app.context.parts import read_message
from serve_app.context.prefilter import is_greeting
from serve_app.context.profile_block import fit_profile, format_with_profile
from serve_app.context.topics import Topic, Topics
from serve_app.language import model_reads
from serve_app.profile.classify import fact_class
from serve_app.retrieval.query import SearchQuery

# Queries searched by their text (the backend embeds it once): MemoryService.search_many.
SearchFn = Callable[[Sequence[SearchQuery]], Awaitable[list[list[dict[str, Any]]]]]
FactsFn = Callable[[str, str, int], Awaitable[list[dict[str, Any]]]]
# (tenant_id, owner keys, limit, session_id) -> the owners' profile memories.
ProfileFn = Callable[[str, Sequence[str], int, str | None], Awaitable[list[dict[str, Any]]]]
# (tenant_id, chunk ids) -> id -> the chunk's data (serve_app.store.citations).
CiteFn = Callable[[str, Sequence[Any]], Awaitable[dict[Any, dict[str, Any]]]]


class RerankFn(Protocol):
    """The request's re-scoring step (serve_app/services/rerank.py).

    Called with the memory candidates, it answers them best first, the re-scored ones
    with ``rerank_score``. ``pool``: how many it re-scores (the block's searches fetch at
    least that many, so a deep candidate list reaches the judge). ``bar``, read after the
    call: the score at which its judgement admits a memory in place of the evidence rule
    (a cross-encoder reads the message and the memory together, which no cosine
    threshold does); None when it has no bar or did not apply (over budget, down), and
    then the rule decides on the order it gave."""

    @property
    def pool(self) -> int: ...

    @property
    def bar(self) -> float | None: ...

    async def __call__(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


OFFLOAD_CHARS = 1000  # a longer message is read (split, small talk) on a worker thread


@dataclass(frozen=True)
class ContextRequest:
    tenant_id: str
    user_id: str
    query: str
    session_id: str | None = None
    agent_id: str | None = None
    history: Sequence[tuple[str, str]] = ()
    token_budget: int = 1000
    top_k: int = 10
    threshold: float | None = None
    max_facts: int = 50
    levers: Levers = field(default_factory=lambda: Levers())
    reference_date: date | None = None  # "last week" in the message is read against it
    explain: bool = False  # record what the block leaves out (ContextResult.left_out)
    rerank: RerankFn | None = None  # re-orders the memory candidates before the rules


@dataclass(frozen=True)
class Levers:
    """The context levers (settings ``MEMSERVE_CONTEXT_*``); the defaults: all off."""

    profile: bool = False
    profile_share: float = 0.25
    profile_max_items: int = 30
    split: bool = False
    max_parts: int = 6
    gate: bool = False
    evidence: Evidence = Evidence(0.35, 0.35)
    small_talk: str = "profile"  # profile | nothing
    # The knowledge base's chunks (org, the agent's, the user's documents) in
    # their own section, cited, through the evidence gate, at most ``knowledge_share``
    # of the budget unless the personal part leaves more (serve_app.context.knowledge).
    knowledge: bool = False
    knowledge_share: float = 0.3
    knowledge_top_k: int = 5
    knowledge_chunk_tokens: int = 120
    # Vectors pooled from the message's encoder run instead of encoded on their own
    # (models.views): the parts that are stretches of the message; the time-free texts.
    pooled_parts: bool = False
    pooled_time_free: bool = False
    # A message in a language the model does not read admits memories only on a cosine
    # of ``foreign_similarity`` (serve_app/language.py).
    foreign_guard: bool = False
    foreign_similarity: float = 0.6
    # Life topics (serve_app/context/topics.py), with the gate: the message's topic is
    # searched too, and memories near it enter on that evidence.
    topic_bridge: bool = False
    topic_min_cosine: float = 0.25
    topic_margin: float = 0.03
    topic_similarity: float = 0.4
    topic_max_items: int = 2

    @property
    def any(self) -> bool:
        return self.profile or self.split or self.gate


@dataclass
class ContextResult:
    context: str
    memories: list[dict[str, Any]] = field(default_factory=list)
    facts: list[dict[str, Any]] = field(default_factory=list)
    search_query: str | None = None  # None: the pre-filter skipped the search
    tokens: int = 0
    profile: list[dict[str, Any]] = field(default_factory=list)  # in the block, first
    profile_tokens: int = 0
    parts: list[str] = field(default_factory=list)  # the parts searched (split lever)
    knowledge: list[dict[str, Any]] = field(default_factory=list)  # cited chunks in the block
    knowledge_tokens: int = 0
    left_out: list[dict[str, Any]] | None = None  # explain: candidates not shown, by rule


def owners_for(user_id: str, agent_id: str | None) -> tuple[str, ...]:
    """Owner keys a user may read (same rule as serve_app.store.records.owner_key)."""
    owners = [user_id]
    if agent_id:
        owners.append(f"@agent:{agent_id}")
    owners.append("@org")
    return tuple(owners)


def shared_owners(agent_id: str | None) -> tuple[str, ...]:
    """The tenant's knowledge a user reads besides their own: the agent's, the org's."""
    return (f"@agent:{agent_id}", "@org") if agent_id else ("@org",)


def visible_in_session(m: dict[str, Any], session_id: str | None) -> bool:
    """Session memories belong to their session: other sessions' ones stay out."""
    return m.get("scope") != "session" or (session_id is not None and m["session_id"] == session_id)


class ContextBuilder:
    def __init__(
        self,
        search: SearchFn,
        facts: FactsFn,
        profile: ProfileFn | None = None,
        cite: CiteFn | None = None,
        topics: Topics | None = None,
    ) -> None:
        """``cite``: chunks' provenance (None: chunks are not split out); ``topics``: the
        life topics a message may be bridged by (None: no bridge)."""
        self.search = search
        self.facts = facts
        self.profile = profile
        self.cite = cite
        self.topics = topics

    async def build(self, req: ContextRequest) -> ContextResult:
        if req.levers.any:
            return await self._build(req)
        trace = LeftOut() if req.explain else None
        facts_task = asyncio.ensure_future(self.facts(req.tenant_id, req.user_id, req.max_facts))
        memories: list[dict[str, Any]] = []
        chunks: list[dict[str, Any]] = []
        text: str | None = None
        try:
            if not is_greeting(req.query):
                text = expand_query(req.query, req.history)
                memories, chunks = await self._memories(req, [text], trace)
            facts = await facts_task
        finally:
            facts_task.cancel()
        chunks = await self._chunks(req, chunks, stems(text or ""), trace)
        reserve = self._reserve(req, chunks)
        _retrieved_why(memories, facts)
        block = format_context(facts, memories, req.token_budget - reserve)
        return self._result(req, block, chunks, text, trace, memories)

    async def _build(self, req: ContextRequest) -> ContextResult:
        """The block with the context levers (each on its own)."""
        lv = req.levers
        trace = LeftOut() if req.explain else None
        text = expand_query(req.query, req.history)
        # a long message's reading is linear but not free (8000 "?" took ~30 ms): off
        # the event loop, so health probes and other requests are not held up
        read = partial(read_message, req.query, text, lv.split, lv.max_parts)
        small, parts = await asyncio.to_thread(read) if len(req.query) > OFFLOAD_CHARS else read()
        if small and lv.small_talk == "nothing":
            return ContextResult("")
        facts_task = asyncio.ensure_future(self.facts(req.tenant_id, req.user_id, req.max_facts))
        profile_task = None
        if lv.profile and self.profile is not None:
            owners = owners_for(req.user_id, req.agent_id)
            profile_task = asyncio.ensure_future(
                self.profile(req.tenant_id, owners, lv.profile_max_items, req.session_id)
            )
        memories: list[dict[str, Any]] = []
        chunks: list[dict[str, Any]] = []
        bridged: list[dict[str, Any]] = []  # found by the message's life topic
        try:
            if not small:
                life_topic = await self._topic(req, text)
                memories, chunks = await self._memories(req, parts, trace, life_topic, bridged)
            facts = await facts_task
            profile = await profile_task if profile_task is not None else []
        finally:
            facts_task.cancel()
            if profile_task is not None:
                profile_task.cancel()
        message = stems(text)  # the expanded text: a follow-up's terms too
        search_query = None if small else text
        chunks = await self._chunks(req, chunks, message, trace)
        budget = req.token_budget - self._reserve(req, chunks)
        p_facts, other, fit = [], list(facts), None
        cap = int(req.token_budget * lv.profile_share)
        if lv.profile:
            p_facts, other = _split_facts(facts)
            for p in profile:
                why = "profile: pinned" if p.get("pinned") else f"profile: {p['profile_class']}"
                p["why"] = why
            # what the profile section shows is in the block anyway; a profile memory
            # that does not fit its cap competes (and is gated) like any other
            fit = fit_profile([*profile, *p_facts], budget, cap)
            shown = {str(i["id"]) for i in fit[0]}
            memories = [m for m in memories if str(m["id"]) not in shown]
        bar = req.rerank.bar if req.rerank is not None else None
        if bar is not None and req.rerank is not None:
            judged = _judged(memories, bar)
            if trace is not None:
                scored = [m for m in memories if m.get("rerank_score") is not None]
                past = f"past the {req.rerank.pool} candidates the re-scoring scored"
                trace.drop(memories, scored, "rerank", past)
                trace.drop(scored, judged, "rerank", f"re-scored under the bar {bar:g}")
            memories = judged
        elif lv.gate:
            ev = lv.evidence
            if lv.foreign_guard and memories and not model_reads(req.query):
                ev = ev.strict(lv.foreign_similarity)
            gated = self._admitted(memories, message, ev)
            if trace is not None:
                trace.drop(memories, gated, "gate")
            in_profile = {str(i["id"]) for i in fit[0]} if fit is not None else set()
            bridged = [m for m in bridged if str(m["id"]) not in in_profile]
            memories = gated + self._bridged(memories, gated, bridged, lv)
        else:
            _retrieved_why(memories, ())
        if trace is not None:
            trace.drop(memories, memories[: req.top_k], "top_k", f"past top_k={req.top_k}")
        memories = memories[: req.top_k]
        if not lv.profile:
            _retrieved_why((), facts)
            block = format_context(facts, memories, budget)
            return self._result(req, block, chunks, search_query, trace, memories, parts=parts)
        if lv.gate:
            words = [f for f in other if stems(f"{f['key']} {f['value']}") & message]
            if trace is not None:
                trace.drop(other, words, "gate", "shares no word with the message")
            other = words
            for f in other:
                f["why"] = "shares a word with the message"
        _retrieved_why((), other)
        block, kept_p, p_tokens = format_with_profile(
            [*profile, *p_facts], other, memories, budget, cap, fit
        )
        if trace is not None:
            shown = [*kept_p, *block.memories]
            over = "over the profile section's share of token_budget"
            trace.drop([*profile, *p_facts], shown, "profile", over)
        kept_mem_profile = [p for p in kept_p if "category" not in p]
        return self._result(
            req,
            block,
            chunks,
            search_query,
            trace,
            memories,
            parts=parts,
            profile=kept_mem_profile,
            profile_tokens=p_tokens,
        )

    @staticmethod
    def _result(
        req: ContextRequest,
        personal: Block,
        chunks: list[dict[str, Any]],
        search_query: str | None,
        trace: LeftOut | None = None,
        memories: Sequence[dict[str, Any]] = (),
        **more: Any,
    ) -> ContextResult:
        """The personal block with the knowledge section in what it left (``memories``:
        the candidates the block was built from, for ``trace``)."""
        out = kb.with_knowledge(
            personal, chunks, req.token_budget, req.levers.knowledge_chunk_tokens
        )
        b = out.block
        if trace is not None:
            trace.drop(memories, b.memories, "budget", "no room left in token_budget")
            trace.drop(chunks, out.chunks, "budget", "no room left in token_budget")
        return ContextResult(
            b.text,
            b.memories,
            b.facts,
            search_query,
            b.tokens,
            knowledge=out.chunks,
            knowledge_tokens=out.tokens,
            left_out=trace.items if trace is not None else None,
            **more,
        )

    @staticmethod
    def _reserve(req: ContextRequest, chunks: Sequence[dict[str, Any]]) -> int:
        lv = req.levers
        return kb.reserve(chunks, req.token_budget, lv.knowledge_share, lv.knowledge_chunk_tokens)

    async def _chunks(
        self,
        req: ContextRequest,
        chunks: list[dict[str, Any]],
        message: frozenset[str],
        trace: LeftOut | None = None,
    ) -> list[dict[str, Any]]:
        """Chunks that pass the evidence gate (always: a knowledge base is big, and noise
        from it costs the prompt), best first, cited; at most ``knowledge_top_k``."""
        if not chunks or self.cite is None:
            return []
        lv = req.levers
        admitted = self._admitted(chunks, message, lv.evidence)
        if trace is not None:
            trace.drop(chunks, admitted, "gate")
            top = f"past knowledge_top_k={lv.knowledge_top_k}"
            trace.drop(admitted, admitted[: lv.knowledge_top_k], "knowledge", top)
        chunks = admitted[: lv.knowledge_top_k]
        kb.attach(chunks, await self.cite(req.tenant_id, [c["id"] for c in chunks]))
        for c in chunks:
            c["why"] = f"knowledge base {kb.label(c['citation'])}: {c['why']}"
        return chunks

    @staticmethod
    def _admitted(
        memories: list[dict[str, Any]], message: frozenset[str], ev: Evidence
    ) -> list[dict[str, Any]]:
        out = []
        cands = [
            (m.get("best_similarity", m.get("similarity")), stems(m["content"])) for m in memories
        ]
        topics = [m.get("topic_similarity") for m in memories]
        for m, why in zip(memories, ev.admit(cands, message, topics), strict=True):
            if why is not None:
                m["why"] = why
                out.append(m)
        return out

    async def _topic(self, req: ContextRequest, text: str) -> Topic | None:
        """The message's life topic, when the bridge is on and it clearly has one (and
        the model reads the message: another language's cosines say nothing)."""
        lv = req.levers
        if not (lv.topic_bridge and lv.gate and self.topics is not None):
            return None
        if lv.foreign_guard and not model_reads(req.query):
            return None
        return await self.topics.of(text, lv.topic_min_cosine, lv.topic_margin)

    @staticmethod
    def _bridged(
        candidates: Sequence[dict[str, Any]],
        gated: Sequence[dict[str, Any]],
        bridged: Sequence[dict[str, Any]],
        lv: Levers,
    ) -> list[dict[str, Any]]:
        """Up to ``topic_max_items`` memories the topic search found near the topic,
        best first, that the gate did not admit (the candidate's own row if the message
        found it too)."""
        admitted = {str(m["id"]) for m in gated}
        found = {str(m["id"]): m for m in candidates}
        out: list[dict[str, Any]] = []
        for row in bridged:
            if len(out) >= lv.topic_max_items:
                break
            key = str(row["id"])
            cosine = float(row.get("similarity") or -1.0)
            if key in admitted or cosine < lv.topic_similarity:
                continue
            m = found.get(key, row)
            m["why"] = f"about {row['bridge_topic']}, like the message (cosine {cosine:.2f})"
            out.append(m)
            admitted.add(key)
        return out

    async def _memories(
        self,
        req: ContextRequest,
        texts: Sequence[str],
        trace: LeftOut | None = None,
        life_topic: Topic | None = None,
        bridged: list[dict[str, Any]] | None = None,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every text searched (broad, and the session), all in one backend call, so one
        encoder batch; a memory found by several texts keeps its best score and its
        best cosine to any of them (``best_similarity``). With the knowledge lever the
        first text also searches the shared owners on their own (so chunks do not take
        memories' places), and chunks come back apart: (memories, chunks). With the
        evidence rule's ``time_free``, a text with time words is searched once more
        without them (dense, in the same call): each memory's ``topic_similarity`` is
        its best cosine to the texts without time words (-1: they did not find it)."""
        owners = owners_for(req.user_id, req.agent_id)
        knowledge = req.levers.knowledge and self.cite is not None
        # a re-scoring judge sees its whole pool: the searches fetch at least that many
        depth = max(req.top_k * 2, req.rerank.pool if req.rerank is not None else 0)
        searches = []
        # per search: are its cosines free of time words (a probe, or a text without
        # time words, when some text has them)?
        time_free: list[bool] = []
        if knowledge:
            top_k = req.levers.knowledge_top_k * 2
            searches.append(_query(req, texts[0], top_k, owners=shared_owners(req.agent_id)))
            time_free.append(False)
        lv = req.levers
        probes = probe_spans(texts) if lv.any and lv.evidence.time_free else {}
        views = part_views(texts) if lv.pooled_parts else {}
        bare: dict[str, tuple[str, Spans] | None] = {}  # each probe text searched once
        for text, (probe, spans) in probes.items():
            if probe not in bare:
                bare[probe] = shifted(views.get(text), text, spans) if lv.pooled_time_free else None
        for text in texts:
            plain = bool(probes) and text not in probes
            time_free.append(plain)
            of, spans = views.get(text, (None, ()))
            searches.append(
                SearchQuery(
                    tenant_id=req.tenant_id,
                    user_id=req.user_id,
                    top_k=depth,
                    threshold=req.threshold,
                    text=text,
                    owners=owners,
                    view_of=of,
                    view_spans=spans,
                    reference_date=req.reference_date,
                )
            )
            if req.session_id:
                searches.append(
                    SearchQuery(
                        tenant_id=req.tenant_id,
                        user_id=req.user_id,
                        top_k=req.top_k,
                        threshold=req.threshold,
                        session_id=req.session_id,
                        text=text,
                        view_of=of,
                        view_spans=spans,
                        reference_date=req.reference_date,
                    )
                )
                time_free.append(plain)
        for probe, view in bare.items():
            of, spans = view if view is not None else (None, ())
            searches.append(
                SearchQuery(
                    tenant_id=req.tenant_id,
                    user_id=req.user_id,
                    top_k=req.top_k * 2,
                    threshold=req.threshold,
                    text=probe,
                    owners=owners,
                    mode="dense",
                    view_of=of,
                    view_spans=spans,
                    reference_date=req.reference_date,
                )
            )
            time_free.append(True)
        if life_topic is not None:  # the message's life topic, searched like a message
            top_k = req.levers.topic_max_items * 2
            searches.append(_query(req, life_topic.text, top_k, owners=owners, mode="dense"))
        batches = await self.search(searches)
        if life_topic is not None:
            rows = [
                m
                for m in batches.pop()
                if visible_in_session(m, req.session_id) and not kb.is_chunk(m)
            ]  # a knowledge chunk enters its own section, cited, or not at all
            for m in rows:
                m["bridge_topic"] = life_topic.text
            if bridged is not None:
                bridged.extend(rows)
        topic = topic_cosines(batches, time_free) if probes else None
        batches = batches[: len(batches) - len(bare)]  # probes only judge, they add nothing
        found = [m for batch in batches for m in batch]
        found = [m for m in found if visible_in_session(m, req.session_id)]
        if len(texts) > 1:
            found = fuse(found)
        found.sort(key=lambda m: (-float(m.get("score") or 0.0), str(m["id"])))
        kept = dedupe(found)
        if trace is not None:
            trace.drop(found, kept, "dedupe", "a near-copy of a better-ranked candidate")
        chunks = [m for m in kept if knowledge and kb.is_chunk(m)]
        kept = [m for m in kept if not (knowledge and kb.is_chunk(m))]
        if req.rerank is not None:
            kept = await req.rerank(kept)
        if topic is not None:
            for m in kept:
                m["topic_similarity"] = topic.get(str(m["id"]), -1.0)
        if req.levers.gate:
            return kept, chunks
        if trace is not None:
            trace.drop(kept, kept[: req.top_k], "top_k", f"past top_k={req.top_k}")
        return kept[: req.top_k], chunks


def _query(req: ContextRequest, text: str, top_k: int, **more: Any) -> SearchQuery:
    """A search of the request's user for ``text`` (its threshold, its reference date)."""
    return SearchQuery(
        tenant_id=req.tenant_id,
        user_id=req.user_id,
        top_k=top_k,
        threshold=req.threshold,
        text=text,
        reference_date=req.reference_date,
        **more,
    )


def _judged(memories: Sequence[dict[str, Any]], bar: float) -> list[dict[str, Any]]:
    """The memories the re-scoring admits, in its order: a score at the bar or above. One
    it did not score (past its pool) has no judgement, so it is not shown on the rule's
    say-so either: one judge per block."""
    out = []
    for m in memories:
        score = m.get("rerank_score")
        if score is not None and float(score) >= bar:
            m["why"] = f"re-scored {float(score):.2f} (bar {bar:g})"
            out.append(m)
    return out


def _retrieved_why(memories: Sequence[dict[str, Any]], facts: Sequence[dict[str, Any]]) -> None:
    """Every block item says why it is there: without the evidence gate a memory is in
    by its search score (and the re-scoring's, when the request asked for it), a fact
    because facts are shown while they fit."""
    for m in memories:
        why = f"retrieved (score {float(m.get('score') or 0):.2f}"
        rr = m.get("rerank_score")
        m["why"] = why + (f", reranked {float(rr):.2f})" if rr is not None else ")")
    for f in facts:
        f.setdefault("why", "fact: facts are shown while they fit")


def _split_facts(facts: Sequence[dict[str, Any]]) -> tuple[list, list]:
    """(profile facts, with their class and why; the other facts)."""
    p_facts, other = [], []
    for f in facts:
        cls = fact_class(f["category"], f["key"])
        if cls is not None:
            f["profile_class"] = cls
            f["why"] = f"profile: {cls}"
        (p_facts if cls is not None else other).append(f)
    return p_facts, other
