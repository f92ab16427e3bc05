"""Consolidation leaves retired memories alone: a memory another one superseded is
history, never merged back into what is valid now (nor decayed)."""

from __future__ import annotations

from serve_app.store import Owner

ALICE = Owner("t1", "alice")


async def test_a_retired_near_duplicate_is_not_merged_or_decayed(make_env):
    env = await make_env(None, merge_similarity=0.85)
    old = await env.add(
        ALICE, "The user's favourite colour is blue", days_ago=90, type="preference", importance=0.6
    )
    new = await env.add(
        ALICE, "The user's favourite colour is blue.", type="preference", supersedes=[old["id"]]
    )
    report = await env.job.run(ALICE)
    assert report["merged"] == 0 and report["decayed"] == 0
    [kept] = await env.sql("SELECT * FROM memory_items WHERE id = %s", old["id"])
    assert kept["status"] == "active" and kept["version"] == old["version"] + 1  # the retire
    assert kept["superseded_by"] == new["id"] and kept["importance"] == old["importance"]
    [current] = await env.sql("SELECT * FROM memory_items WHERE id = %s", new["id"])
    assert current["version"] == 1 and "merged_from" not in current["data"]
