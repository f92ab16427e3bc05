"""A tenant's extraction guidance reaches the prompt (and only that tenant's), and its
categories decide the memories' tags: real database, encoder and the scripted LLM."""

from __future__ import annotations

import pytest

from serve_app.auth import Principal
from serve_app.extraction.guidance import for_request, guidance_prompt
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.extraction.prompts import EXTRACT_MARKER
from serve_app.services.tenant_settings import TenantService
from serve_app.store.guarded import GuardedWriter
from serve_app.store.tenant_settings import TenantStore
from serve_app.store.turns import SessionKey
from serve_app.tenant_settings import ExtractionGuidance
from serve_app.testing.llm_server import extraction, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

GUIDANCE = {
    "custom_instructions": "Write every memory in the third person, in English.",
    "includes": "travel plans and dietary needs",
    "excludes": "anything about the user's health",
    "custom_categories": [{"travel": "trips, flights, hotels"}, {"Food": "diet, restaurants"}],
}


def system_prompt(call: dict) -> str:
    return "\n".join(m["content"] for m in call["messages"] if m["role"] == "system")


@pytest.fixture
async def harness(make_harness, fake_llm):
    settings = settings_for(fake_llm.url).with_(extract={"custom_instructions": "ENV-ONLY"})
    h = await make_harness(settings)
    tenants = TenantService(TenantStore(h.pool), settings)
    h.pipeline.guidance = tenants.guidance  # what the extractor deployment wires
    admin = Principal("6f9619ff-8b86-4d11-b42d-00c04fc964ff", "acme", "admin")
    await tenants.replace("acme", {"extraction": GUIDANCE}, admin)
    return h


async def test_the_tenants_guidance_is_in_its_prompt_and_its_categories_are_the_tags(
    harness, fake_llm
):
    h = harness
    fake_llm.add_rule(
        "Lisbon",
        extraction(
            [
                {
                    **memory("The user flies to Lisbon on 2026-12-03"),
                    "tags": ["TRAVEL", "food", "weekend"],
                }
            ]
        ),
    )
    k = SessionKey("acme", "ann", "s1")
    await h.say(k, ("user", "I fly to Lisbon on Dec 3rd"), ("assistant", "Have fun!"))
    out = await h.pipeline.process_session(k, force=True)
    assert out.saved == 1 and out.error is None, out
    prompt = system_prompt(fake_llm.calls("extract")[-1])
    assert prompt.startswith(EXTRACT_MARKER)  # the contract stays first
    for text in (
        "Write every memory in the third person",
        "travel plans and dietary needs",
        "anything about the user's health",
        "- travel: trips, flights, hotels",
        "- Food: diet, restaurants",
    ):
        assert text in prompt, text
    assert "ENV-ONLY" not in prompt  # the tenant's instructions win over the environment's
    [m] = await h.memories("ann", "extraction")
    assert m["tags"] == ["travel", "Food"]  # only category names, in their spelling

    # another tenant: the environment's guidance, no categories, the LLM's tags kept
    fake_llm.add_rule("Porto", extraction([{**memory("The user visits Porto"), "tags": ["x"]}]))
    k2 = SessionKey("other", "bob", "s1")
    await h.say(k2, ("user", "I visit Porto soon"), ("assistant", "Nice"))
    assert (await h.pipeline.process_session(k2, force=True)).saved == 1
    prompt = system_prompt(fake_llm.calls("extract")[-1])
    assert "ENV-ONLY" in prompt and "trips, flights" not in prompt
    assert [m["tags"] for m in await h.memories("bob", "extraction")] == [["x"]]


async def test_a_requests_own_categories_replace_the_tenants(harness, fake_llm):
    h = harness
    fake_llm.add_rule(
        "sushi", extraction([{**memory("The user loves sushi"), "tags": ["cuisine", "travel"]}])
    )
    k = SessionKey("acme", "cy", "infer-0123456789abcdef")
    meta = {"metadata": {"custom_categories": [{"cuisine": "kinds of food"}]}}
    await h.say(k, ("user", "I love sushi"), meta=meta)
    assert (await h.pipeline.process_session(k, force=True)).saved == 1
    prompt = system_prompt(fake_llm.calls("extract")[-1])
    assert "- cuisine: kinds of food" in prompt and "trips, flights" not in prompt
    assert "third person" in prompt  # the tenant's other guidance stays
    assert [m["tags"] for m in await h.memories("cy", "extraction")] == [["cuisine"]]


def test_no_guidance_adds_nothing_to_the_prompt():
    assert guidance_prompt(ExtractionGuidance()) == ""
    g = ExtractionGuidance(categories=(("a", ""),))
    assert "- a\n" in guidance_prompt(g) + "\n"
    assert for_request(g, {}) is g
    own = {"metadata": {"custom_categories": [{"b": "B"}, "junk", {"": "x"}]}}
    assert for_request(g, own).categories == (("b", "B"),)
    assert for_request(g, {"metadata": {"custom_categories": "junk"}}) is g


async def test_extractions_writes_follow_the_tenants_quotas_and_retention(
    make_harness, fake_llm, encoder
):
    settings = settings_for(fake_llm.url)
    h = await make_harness(settings)
    tenants = TenantService(TenantStore(h.pool), settings)
    slug = encoder.spec.table_slug
    writer = GuardedWriter.from_settings(  # what the extractor deployment wires
        h.pool, slug, settings, quotas=tenants.quotas, retention=tenants.retention
    )
    p = h.pipeline
    h.pipeline = ExtractionPipeline(h.pool, slug, p.embed, p.llm, settings, writer=writer)
    admin = Principal("6f9619ff-8b86-4d11-b42d-00c04fc964ff", "acme", "admin")
    await tenants.replace(
        "acme", {"quotas": {"max_memories_per_user": 1}, "retention": {"preference": 3600}}, admin
    )
    fake_llm.add_rule(
        "tea",
        extraction(
            [
                memory("The user likes green tea", "preference"),
                memory("The user lives in Oslo", "fact"),
            ]
        ),
    )
    k = SessionKey("acme", "dee", "s1")
    await h.say(k, ("user", "I like tea and I live in Oslo"))
    out = await h.pipeline.process_session(k)
    assert out.saved == 1, out  # the second is over the tenant's quota of 1
    [m] = await h.memories("dee", "extraction")
    left = (m["expires_at"] - m["created_at"]).total_seconds()
    assert m["type"] == "preference" and 3590 < left < 3601
