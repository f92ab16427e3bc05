"""FactStore (facts) against a real PostgreSQL: one active value per key, with history."""

from __future__ import annotations

import pytest

from serve_app.store.facts import CONTEXT_FACT_COLUMNS
from serve_app.store.guarded import GuardedWriter
from serve_app.store.records import Owner

A = Owner("t1", "alice")


@pytest.fixture
def facts(pool):
    return GuardedWriter(pool, "test")


async def test_upsert_outcomes_and_history(facts):
    assert await facts.upsert_fact(A, "identity", "name", "Alex", 0.8) == "added"
    assert await facts.upsert_fact(A, "identity", "name", "alex.", 0.9) == "confirmed"
    assert await facts.upsert_fact(A, "identity", "name", "Sam", 0.5) == "ignored"
    assert (
        await facts.upsert_fact(A, "identity", "name", "Sam", 0.95, session_id="s9") == "replaced"
    )
    [active] = await facts.facts.list(A)
    assert (active["value"], active["session_id"], active["active"]) == ("Sam", "s9", True)
    versions = await facts.facts.list(A, include_inactive=True)
    assert [(v["value"], v["active"]) for v in versions] == [("Alex", False), ("Sam", True)]
    assert versions[0]["superseded_by"] == active["id"]
    assert versions[0]["confidence"] == pytest.approx(0.9)  # the confirmation raised it


async def test_active_orders_by_importance_and_stays_in_its_tenant_and_user(facts):
    await facts.upsert_fact(A, "pref", "drink", "tea", 0.6)
    await facts.upsert_fact(A, "constraint", "diet", "vegetarian", 0.9)
    await facts.upsert_fact(Owner("t1", "bob"), "pref", "drink", "coffee", 1.0)
    await facts.upsert_fact(Owner("t2", "alice"), "pref", "drink", "water", 1.0)
    rows = await facts.facts.active("t1", "alice", limit=10)
    assert [r["value"] for r in rows] == ["vegetarian", "tea"]  # equal importance: confidence
    assert list(rows[0]) == [*CONTEXT_FACT_COLUMNS]
    assert "updated_at" in CONTEXT_FACT_COLUMNS and "active" not in CONTEXT_FACT_COLUMNS
    assert len(await facts.facts.active("t1", "alice", limit=1)) == 1


async def test_list_pages_by_key_and_version_without_gaps_or_repeats(facts):
    """Pages follow (category, key, created_at, id): every version once, in order, and a
    category filter applies in SQL before the limit (not to one page after it)."""
    for i in range(5):  # five versions of one key: the history a correction loop grows
        await facts.upsert_fact(A, "identity", "city", f"City{i}", 0.5 + i / 10)
    await facts.upsert_fact(A, "pref", "drink", "tea", 0.9)
    whole = await facts.facts.list(A, include_inactive=True)
    assert len(whole) == 6
    seen, after = [], None
    while True:
        page = await facts.facts.list(A, include_inactive=True, limit=2, after=after)
        seen += page
        if len(page) < 2:
            break
        last = page[-1]
        after = (last["category"], last["key"], last["created_at"], last["id"])
    assert [r["id"] for r in seen] == [r["id"] for r in whole]
    prefs = await facts.facts.list(A, include_inactive=True, category="pref", limit=1)
    assert [r["value"] for r in prefs] == ["tea"]
