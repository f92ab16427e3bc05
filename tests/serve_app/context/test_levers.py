"""The context builder with issue 29's levers: the profile first, parts searched in one
call, the evidence gate, small talk; all levers off gives the block as before."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from serve_app.context import ContextBuilder, ContextRequest
from serve_app.context.builder import Levers
from serve_app.context.evidence import Evidence

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ALL = Levers(profile=True, split=True, gate=True, evidence=Evidence(0.45, 0.25))


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


def fact(category, key, value, importance=0.5):
    return {
        "id": uuid.uuid4(),
        "category": category,
        "key": key,
        "value": value,
        "confidence": 1.0,
        "importance": importance,
        "updated_at": NOW,
    }


class Backend:
    """The builder's three callables over fixed data; records what was asked."""

    def __init__(self, by_text=None, facts=(), profile=()):
        self.by_text = by_text or {}
        self._facts = list(facts)
        self._profile = list(profile)
        self.calls: list[list[str]] = []
        self.depths: list[list[int]] = []  # each call's top_k per query

    async def search(self, queries):
        self.calls.append([q.text for q in queries])
        self.depths.append([q.top_k for q in queries])
        return [[dict(m) for m in self.by_text.get(q.text, [])] for q in queries]

    async def facts(self, tenant, user, limit):
        return [dict(f) for f in self._facts]

    async def profile(self, tenant, owners, limit, session_id):
        return [dict(p) for p in self._profile]

    def builder(self):
        return ContextBuilder(self.search, self.facts, self.profile)


def build(backend, query, levers=ALL, **kw):
    req = ContextRequest("t", "u", query, levers=levers, **kw)
    return asyncio.run(backend.builder().build(req))


def test_profile_is_first_and_always_there():
    allergy = mem("I'm allergic to peanuts", None, profile_class="constraint", pinned=None)
    b = Backend(profile=[allergy], by_text={"Suggest a recipe for dinner": []})
    r = build(b, "Suggest a recipe for dinner")
    assert [p["content"] for p in r.profile] == ["I'm allergic to peanuts"]
    assert r.context.index("About the user") < r.context.index("allergic")
    assert r.profile[0]["why"] == "profile: constraint"
    assert 0 < r.profile_tokens <= 1000 // 4


def test_profile_is_capped_by_its_share_of_the_budget():
    many = [
        mem(f"Always do thing number {i} the way I like it", None, profile_class="instruction")
        for i in range(50)
    ]
    r = build(Backend(profile=many), "Tell me a story", token_budget=400)
    assert r.profile_tokens <= 100 and 0 < len(r.profile) < 50


def test_parts_searched_in_one_call_and_fused():
    city = mem("Lives in Oslo", 0.6)
    bakery = mem("Favourite bakery is Apent", 0.5)
    msg = "What city am I in? Any good bakeries around?"
    b = Backend(
        by_text={
            "What city am I in?": [city],
            "Any good bakeries around?": [bakery],
            msg: [dict(bakery, similarity=0.3)],
        }
    )
    r = build(b, msg)
    assert len(b.calls) == 1 and len(b.calls[0]) == 3  # one backend call, three texts
    assert {m["content"] for m in r.memories} == {"Lives in Oslo", "Favourite bakery is Apent"}


def test_gate_keeps_noise_out():
    oslo = mem("Lives in Oslo near the fjord", -0.001, score=0.9)
    tea = mem("Loves green tea", 0.7, score=0.8)
    b = Backend(by_text={"Recommend a green tea": [oslo, tea]})
    r = build(b, "Recommend a green tea")
    assert [m["content"] for m in r.memories] == ["Loves green tea"]
    assert r.memories[0]["why"].startswith("similar")
    off = build(b, "Recommend a green tea", levers=Levers())
    assert len(off.memories) == 2  # all levers off: today's block


def test_facts_outside_the_profile_need_evidence():
    b = Backend(facts=[fact("identity", "name", "Anna"), fact("preference", "editor", "vim")])
    r = build(b, "Recommend a good novel")
    assert [f["key"] for f in r.facts] == ["name"] and r.facts[0]["why"] == "profile: identity"
    r = build(b, "Which editor plugins are worth it?")
    assert {f["key"] for f in r.facts} == {"name", "editor"}


def test_small_talk_gets_the_profile_only_or_nothing():
    p = mem("Always answer in bullet points", None, profile_class="instruction")
    b = Backend(profile=[p])
    r = build(b, "Thanks, that helps a lot!")
    assert b.calls == [] and r.memories == [] and len(r.profile) == 1
    quiet = Levers(profile=True, split=True, gate=True, small_talk="nothing")
    assert build(b, "thanks!", levers=quiet).context == ""


def test_profile_memories_are_not_repeated_in_the_memories():
    p = mem("Lives in Oslo", 0.9, profile_class="identity")
    b = Backend(profile=[p], by_text={"Where do I live?": [dict(p)]})
    r = build(b, "Where do I live?")
    assert len(r.profile) == 1 and r.memories == []


def test_a_vague_follow_up_is_not_small_talk():
    budget = mem("Our Hawaii vacation budget is $10,000", 0.5)
    b = Backend(by_text={"How much? planning vacation hawaii": [budget]})
    history = (("user", "We are planning a vacation to Hawaii"), ("assistant", "Lovely!"))
    r = build(b, "How much?", history=history)
    assert r.search_query == "How much? planning vacation hawaii"
    assert [m["content"] for m in r.memories] == [budget["content"]]


def test_every_search_of_a_block_reads_periods_against_the_reference_date():
    """ "last week" in a message is read against the day it is said, in each of the
    block's searches (its parts, the session, the time-free probe, the knowledge base)."""
    seen: list[object] = []

    class Recording(Backend):
        async def search(self, queries):
            seen.extend(q.reference_date for q in queries)
            return await super().search(queries)

    asked = datetime(2023, 5, 17, tzinfo=UTC).date()
    build(
        Recording(),
        "What did I cook last week? And what should I shop for?",
        session_id="s1",
        reference_date=asked,
    )
    assert len(seen) >= 3 and set(seen) == {asked}
