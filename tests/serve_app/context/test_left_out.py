"""The context builder's ``explain`` (what it left out, by which rule) and its rerank
step, on fixed search results: with the levers off (the plain block) and on (profile
share, gate), and a rerank step that changes which candidates make the cut."""

from __future__ import annotations

from serve_app.context import ContextBuilder, ContextRequest
from serve_app.context.builder import Levers
from serve_app.context.evidence import Evidence
from tests.serve_app.context.test_levers import Backend, build, mem

OFF = Levers()
QUERY = "Which tires fit my red Tesla?"


def rules(result) -> list[tuple[str, str]]:
    return [(x["content"], x["rule"]) for x in result.left_out]


def test_plain_block_explains_top_k_and_budget_and_every_item_says_why():
    texts = [f"Memory number {i} about the red Tesla" for i in range(4)]
    found = [mem(t, 0.9 - i / 10, 0.9 - i / 10) for i, t in enumerate(texts)]
    b = Backend(by_text={QUERY: found})
    assert build(b, QUERY, levers=OFF).left_out is None  # not asked: not recorded
    r = build(b, QUERY, levers=OFF, top_k=3, explain=True, token_budget=60)
    shown = [m["content"] for m in r.memories]
    assert shown == texts[: len(shown)] and 0 < len(shown) < 3
    # the search's top_k cut comes first, then the token budget's
    assert rules(r) == [(texts[3], "top_k")] + [(t, "budget") for t in texts[len(shown) : 3]]
    assert all(m["why"].startswith("retrieved (score") for m in r.memories)


def test_profile_over_its_share_is_explained():
    texts = [f"Always do thing number {i} the way I like it" for i in range(40)]
    many = [mem(t, None, profile_class="instruction") for t in texts]
    levers = Levers(profile=True, gate=True, evidence=Evidence(0.45, 0.25))
    b = Backend(profile=many)
    r = build(b, "Tell me a story", levers=levers, token_budget=400, explain=True)
    out = {x["content"] for x in r.left_out if x["rule"] == "profile"}
    assert out and len(out) + len(r.profile) == 40
    assert not out & {p["content"] for p in r.profile}


def test_gate_and_rerank_step():
    near = mem("My red Tesla needs winter tires", 0.8, 0.8)
    far = mem("I have two cats", 0.1, 0.7)
    mid = mem("Tesla tires are expensive in winter", 0.7, 0.6)
    levers = Levers(gate=True, evidence=Evidence(0.45, 0.25))
    b = Backend(by_text={QUERY: [near, far, mid]})
    r = build(b, QUERY, levers=levers, explain=True)
    assert rules(r) == [("I have two cats", "gate")]
    assert "best cosine 0.10" in r.left_out[0]["detail"]

    async def last_first(rows):
        for i, row in enumerate(rows):
            row["rerank_score"] = float(i)
        return rows[::-1]

    r = build(b, QUERY, levers=levers, explain=True, top_k=1, rerank=last_first)
    assert [m["content"] for m in r.memories] == ["Tesla tires are expensive in winter"]
    assert rules(r) == [("I have two cats", "gate"), ("My red Tesla needs winter tires", "top_k")]
    assert r.left_out[1]["rerank_score"] == 0.0


def test_a_near_copy_is_left_out_by_dedupe():
    best = mem("My red Tesla needs winter tires", 0.8, 0.9)
    copy = mem("My red Tesla needs winter tires!", 0.8, 0.8)
    b = Backend(by_text={QUERY: [best, copy]})
    r = build(b, QUERY, levers=OFF, explain=True)
    assert [m["id"] for m in r.memories] == [best["id"]]
    assert [(x["id"], x["rule"]) for x in r.left_out] == [(copy["id"], "dedupe")]


async def test_chunks_past_knowledge_top_k_and_under_the_gate_are_named():
    chunks = [
        mem("Tesla winter tires: fit the 18 inch wheels", 0.8, 0.9, type="document_chunk"),
        mem("Winter tires for a red Tesla: the approved list", 0.7, 0.8, type="document_chunk"),
        mem("Office coffee machine manual", 0.1, 0.7, type="document_chunk"),
    ]
    b = Backend(by_text={QUERY: chunks})

    async def cite(tenant, ids):
        return {i: {"title": "Tyres"} for i in ids}

    levers = Levers(knowledge=True, knowledge_top_k=1, evidence=Evidence(0.45, 0.25))
    builder = ContextBuilder(b.search, b.facts, b.profile, cite)
    r = await builder.build(ContextRequest("t", "u", QUERY, levers=levers, explain=True))
    assert [c["id"] for c in r.knowledge] == [chunks[0]["id"]]
    assert [(x["id"], x["rule"]) for x in r.left_out] == [
        (chunks[2]["id"], "gate"),
        (chunks[1]["id"], "knowledge"),
    ]
