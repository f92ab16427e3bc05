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

    # a step with no bar only orders: the gate still decides, on the step's order
    last_first = Step(lambda i, row: float(i), bar=None)
    r = build(b, QUERY, levers=levers, explain=True, top_k=1, rerank=last_first)
    assert [m["content"] for m in r.memories] == ["Tesla tires are expensive in winter"]
    assert rules(r) == [("I have two cats", "gate"), ("My red Tesla needs winter tires", "top_k")]
    assert r.left_out[1]["rerank_score"] == 0.0


class Step:
    """A rerank step over fixed scores (``score(position, row)``), with a bar or none."""

    def __init__(self, score, bar: float | None, pool: int = 20) -> None:
        self.score, self.bar, self.pool = score, bar, pool

    async def __call__(self, rows):
        head, tail = rows[: self.pool], rows[self.pool :]
        for i, row in enumerate(head):
            row["rerank_score"] = self.score(i, row)
        return sorted(head, key=lambda r: -r["rerank_score"]) + tail


def test_a_judge_with_a_bar_admits_by_its_score_in_place_of_the_gate():
    """What the re-scoring scores at its bar or above is shown, in its order, whatever
    the cosine says (the gate refuses the cats at 0.10); what it scores under the bar,
    and what lies past its pool unscored, is left out under the rule ``rerank``."""
    near = mem("My red Tesla needs winter tires", 0.8, 0.8)
    far = mem("I have two cats", 0.1, 0.7)
    mid = mem("Tesla tires are expensive in winter", 0.7, 0.6)
    past = mem("Tesla service is on Friday", 0.6, 0.5)
    levers = Levers(gate=True, evidence=Evidence(0.45, 0.25))
    b = Backend(by_text={QUERY: [near, far, mid, past]})
    scores = {near["content"]: -2.0, far["content"]: 3.0, mid["content"]: 0.0}
    judge = Step(lambda i, row: scores[row["content"]], bar=0.0, pool=3)
    r = build(b, QUERY, levers=levers, explain=True, rerank=judge)
    assert [m["content"] for m in r.memories] == ["I have two cats", mid["content"]]
    assert r.memories[0]["why"] == "re-scored 3.00 (bar 0)"
    assert sorted(rules(r)) == [(near["content"], "rerank"), (past["content"], "rerank")]
    detail = {x["content"]: x["detail"] for x in r.left_out}
    assert detail == {
        near["content"]: "re-scored under the bar 0",
        past["content"]: "past the 3 candidates the re-scoring scored",
    }
    # the searches fetch at least the judge's pool
    deep = Step(lambda i, row: 1.0, bar=0.0, pool=50)
    build(b, QUERY, levers=levers, top_k=10, rerank=deep)
    assert max(b.depths[-1]) == 50
    assert max(b.depths[-2]) == 2 * 10  # a shallower pool: twice the request's top_k


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
