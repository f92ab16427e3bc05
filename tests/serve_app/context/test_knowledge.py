"""The knowledge base in context blocks (issue 33): citations, the "From the knowledge
base" section, the one budget split (personal first), and the evidence gate on chunks."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from serve_app.context import ContextBuilder, ContextRequest
from serve_app.context import knowledge as kb
from serve_app.context.builder import Levers
from serve_app.context.evidence import Evidence
from serve_app.context.format import Block, format_context
from serve_app.text import count_tokens

LEVERS = Levers(profile=True, split=False, gate=True, evidence=Evidence(0.45, 0.25), knowledge=True)


def mem(content, sim, score=0.5, **extra):
    return {
        "id": uuid.uuid4(),
        "content": content,
        "type": "fact",
        "scope": "user",
        "similarity": sim,
        "score": score,
        "session_id": None,
        **extra,
    }


def chunk(
    content,
    sim,
    score=0.5,
    *,
    title="Returns policy",
    heading=("Returns", "Damaged"),
    index=0,
    scope="org",
):
    data = {
        "document_id": "doc-1",
        "version": 2,
        "chunk_index": index,
        "char_start": 0,
        "char_end": len(content),
        "heading_path": list(heading),
        "title": title,
        "source_url": "https://example.com/returns",
    }
    row = mem(content, sim, score, type="document_chunk", scope=scope)
    row["_data"] = data
    return row


class Backend:
    """The builder's callables over fixed rows; chunks' data served by ``cite``."""

    def __init__(self, rows=(), shared=(), profile=()):
        self.rows, self.shared, self._profile = list(rows), list(shared), list(profile)
        self.queries = []

    async def search(self, queries):
        self.queries.append(list(queries))
        return [
            [
                dict(r)
                for r in (
                    self.shared if "@org" in q.owners and q.user_id not in q.owners else self.rows
                )
            ]
            for q in queries
        ]

    async def facts(self, tenant, user, limit):
        return []

    async def profile(self, tenant, owners, limit, session_id):
        return [dict(p) for p in self._profile]

    async def cite(self, tenant, ids):
        by_id = {r["id"]: r["_data"] for r in (*self.rows, *self.shared) if "_data" in r}
        return {i: by_id[i] for i in ids if i in by_id}

    def build(self, query, levers=LEVERS, **kw):
        b = ContextBuilder(self.search, self.facts, self.profile, self.cite)
        return asyncio.run(b.build(ContextRequest("t", "u", query, levers=levers, **kw)))


def test_citation_and_label():
    c = kb.citation(chunk("x", 0.9)["_data"])
    assert c == {
        "document_id": "doc-1",
        "title": "Returns policy",
        "chunk_index": 0,
        "heading_path": ["Returns", "Damaged"],
        "version": 2,
        "source_url": "https://example.com/returns",
    }
    assert kb.label(c) == "[Returns policy › Damaged]"
    assert kb.label({"document_id": "d9", "heading_path": []}) == "[d9]"
    assert kb.label(kb.citation({})) == "[document]"  # a chunk without data still cites
    assert len(kb.label({"title": "T" * 500})) < 100  # a huge title is clipped


def test_shorten_cuts_at_words_within_tokens():
    text = " ".join(f"word{i}" for i in range(400))
    short = kb.shorten(text, 50)
    assert count_tokens(short) <= 50 and short.endswith(" …")
    assert text.startswith(short[:-2])  # whole words, in order
    assert kb.shorten("fits easily", 50) == "fits easily"


def test_section_is_inside_the_same_budget_and_before_the_footer():
    memories = [mem(f"Personal memory number {i} about sailing boats", 0.9) for i in range(40)]
    chunks = [chunk(f"Damaged items are replaced within {i} days " * 20, 0.9) for i in range(8)]
    for c in chunks:
        c["citation"] = kb.citation(c["_data"])
    budget = 600
    res = kb.reserve(chunks, budget, 0.3, 120)
    assert 0 < res <= int(budget * 0.3)
    personal = format_context([], memories, budget - res)
    out = kb.with_knowledge(personal, chunks, budget, 120)
    text = out.block.text
    assert count_tokens(text) <= budget and out.block.tokens == count_tokens(text)
    assert text.index("Relevant memories:") < text.index(kb.KNOWLEDGE_HEADER)
    assert text.index(kb.KNOWLEDGE_HEADER) < text.index("Use this context only")
    assert "[Returns policy › Damaged]" in text and out.chunks
    assert out.tokens >= res  # at least its reserve
    # personal knowledge keeps at least 1 - share of the budget: as many memories as
    # without the section's reserve would allow
    alone = format_context([], memories, budget - int(budget * 0.3))
    assert len(out.block.memories) >= len(alone.memories)


def test_section_takes_what_a_short_personal_part_leaves():
    chunks = [chunk(f"Refund rule {i}: keep the receipt and the box " * 3, 0.9) for i in range(15)]
    for c in chunks:
        c["citation"] = kb.citation(c["_data"])
    budget = 1000
    res = kb.reserve(chunks, budget, 0.3, 120)
    out = kb.with_knowledge(format_context([], [], budget - res), chunks, budget, 120)
    assert out.tokens > res > 0  # more than its share: nothing personal needed the room
    assert count_tokens(out.block.text) <= budget
    n = out.block.text.count("[Returns policy › Damaged]")
    assert n == len(out.chunks) == 15  # all of them, where 30% held fewer


def test_no_chunks_leaves_the_block_untouched():
    personal = format_context([], [mem("Sails a dinghy", 0.9)], 300)
    assert kb.with_knowledge(personal, [], 300, 120).block is personal
    assert kb.with_knowledge(Block(""), [], 300, 120).block.text == ""


def test_builder_cites_chunks_in_their_own_section_and_gates_them():
    good = chunk("Damaged items can be returned within 30 days for a refund", 0.62)
    noise = chunk("Our office dog is called Biscuit", 0.05, score=0.99, index=7)
    personal = mem("Bought a kettle that arrived damaged", 0.7)
    b = Backend(rows=[personal], shared=[noise, good])
    r = b.build("Can I return a damaged kettle for a refund?")
    assert [c["content"] for c in r.knowledge] == [good["content"]]  # noise gated out
    cited = r.knowledge[0]
    assert cited["citation"]["document_id"] == "doc-1"
    assert cited["why"].startswith("knowledge base [Returns policy › Damaged]: ")
    assert [m["content"] for m in r.memories] == [personal["content"]]  # chunk not a memory
    assert r.context.index("Relevant memories:") < r.context.index("From the knowledge base:")
    assert "- [Returns policy › Damaged] Damaged items can be returned" in r.context
    assert "Biscuit" not in r.context
    assert r.knowledge_tokens > 0 and r.tokens <= 1000
    # one backend call: the shared owners searched on their own, next to the broad search
    assert len(b.queries) == 1 and any(q.owners == ("@org",) for q in b.queries[0])


def test_agent_knowledge_is_searched_only_with_the_agent():
    b = Backend()
    b.build("how do I reset the router?", agent_id="support")
    b.build("how do I reset the router?")
    shared = [q.owners for call in b.queries for q in call if "u" not in q.owners]
    assert shared == [("@agent:support", "@org"), ("@org",)]


def test_profile_first_then_knowledge_under_one_budget():
    allergy = mem("I'm allergic to peanuts", None, profile_class="constraint", pinned=None)
    chunks = [
        chunk(f"Menu item {i} contains peanuts and sesame oil " * 8, 0.7, index=i)
        for i in range(10)
    ]
    b = Backend(shared=chunks, profile=[allergy])
    r = b.build("Which menu items contain peanuts?", token_budget=300)
    assert r.context.index("About the user") < r.context.index("From the knowledge base:")
    assert r.profile and r.tokens <= 300
    assert 0 < len(r.knowledge) <= LEVERS.knowledge_top_k


def test_knowledge_lever_off_keeps_the_block_as_before():
    c = chunk("Damaged items can be returned within 30 days", 0.62)
    off = replace(LEVERS, knowledge=False)
    r = Backend(rows=[c]).build("return a damaged item", levers=off)
    assert r.knowledge == [] and "From the knowledge base" not in r.context
    assert [m["content"] for m in r.memories] == [c["content"]]  # a memory, as before


def test_legacy_path_also_gates_and_cites():
    good = chunk("Damaged items can be returned within 30 days for a refund", 0.62)
    noise = chunk("Our office dog is called Biscuit", 0.05, index=3)
    lv = Levers(knowledge=True, evidence=Evidence(0.45, 0.25))  # issue 29's levers off
    r = Backend(shared=[good, noise]).build("return a damaged item for a refund", levers=lv)
    assert [c["citation"]["chunk_index"] for c in r.knowledge] == [0]
    assert "[Returns policy › Damaged]" in r.context and "Biscuit" not in r.context
