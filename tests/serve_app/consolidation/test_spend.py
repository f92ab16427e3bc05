"""Consolidation's LLM calls (insights, digests) metered as purpose ``consolidate``.

The scripted LLM counts what it served the way a provider bills it; the metered
totals of the run must equal them, with ``usage`` reported and without it (then the
tokenizer's estimate, which is how the scripted LLM counts too)."""

from __future__ import annotations

import json

import pytest

from serve_app.store import Owner

ALICE = Owner("t1", "alice")
HIKING = [
    "The user goes hiking every weekend",
    "The user bought new hiking boots",
    "The user plans a hiking trip to the Alps",
]
LISBON = [
    "The user booked a flight to Lisbon in March",
    "The user asked for fado bars near the Alfama",
    "The user compared hotel prices in central Lisbon",
]


@pytest.mark.parametrize("reported", [True, False], ids=["usage", "estimated"])
async def test_consolidate_totals_equal_what_the_llm_served(make_env, fake_llm, reported):
    fake_llm.set_usage(reported)
    fake_llm.add_rule(
        "Lisbon", json.dumps({"summary": "The user travelled to Lisbon."}), kind="digest"
    )
    env = await make_env(
        fake_llm.url, spend=True, cluster_similarity=0.35, episodic_age_days=30, digest_batch=10
    )
    for text in HIKING:
        await env.add(ALICE, text, type="fact")
    for i, text in enumerate(LISBON):
        await env.add(ALICE, text, days_ago=60 + i, type="episodic")
    report = await env.job.run(ALICE)
    assert report["insights"] >= 1 and report["digests"] == 1
    served = {k: fake_llm.served(k) for k in ("insight", "digest")}
    assert served["insight"]["calls"] >= 1 and served["digest"]["calls"] == 1
    rows = await env.sql(
        "SELECT tenant_id, user_id, purpose, calls::int, prompt_tokens::int,"
        " completion_tokens::int, estimated_calls::int FROM llm_usage_daily"
    )
    assert [(r["tenant_id"], r["user_id"], r["purpose"]) for r in rows] == [
        ("t1", "alice", "consolidate")
    ]
    [row] = rows
    for field in ("calls", "prompt_tokens", "completion_tokens"):
        assert row[field] == served["insight"][field] + served["digest"][field], field
    assert row["estimated_calls"] == (0 if reported else row["calls"])
    [open_] = await env.sql("SELECT count(*) AS n FROM llm_calls WHERE finished_at IS NULL")
    assert open_["n"] == 0
