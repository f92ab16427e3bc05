"""TurnStore (session_turns, session_state) against a real PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.turns import SessionKey, TurnCounts, TurnStore

K = SessionKey("t1", "alice", "s1")


@pytest.fixture
def turns(pool):
    return TurnStore(pool)


async def test_append_numbers_turns_and_counts_pending(turns):
    first = await turns.append(
        K, [("user", "hi"), ("assistant", "hello")], agent_id=None, ttl_hours=1
    )
    second = await turns.append(K, [("user", "again")], agent_id=None, ttl_hours=1)
    assert (first.first_index, first.last_index, first.pending_user_turns) == (1, 2, 1)
    assert (second.first_index, second.last_index, second.pending_user_turns) == (3, 3, 2)
    assert await turns.status(K) == TurnCounts(turns=3, pending=3, failed=0, compressed=0)


async def test_status_counts_each_state_and_only_this_session(turns):
    assert await turns.status(K) == TurnCounts(0, 0, 0, 0)
    await turns.append(K, [("user", f"m{i}") for i in range(4)], agent_id=None, ttl_hours=1)
    await turns.append(SessionKey("t1", "bob", "s1"), [("user", "x")], agent_id=None, ttl_hours=1)
    await turns.append(SessionKey("t2", "alice", "s1"), [("user", "x")], agent_id=None, ttl_hours=1)
    claimed = await turns.claim_pending(K, limit=3, lease_s=60)
    assert [r["turn_index"] for r in claimed] == [1, 2, 3]
    await turns.mark_extracted([claimed[0]["id"]])
    await turns.mark_extracted([claimed[1]["id"]], error="unusable")
    await turns.mark_compressed([claimed[0]["id"]])
    assert await turns.status(K) == TurnCounts(turns=4, pending=2, failed=1, compressed=1)
    assert await turns.pending_count(K) == 2


async def test_claims_exclude_each_other_and_release_counts_attempts(turns):
    await turns.append(K, [("user", "a"), ("user", "b")], agent_id=None, ttl_hours=1)
    mine = await turns.claim_pending(K, limit=10, lease_s=60)
    assert len(mine) == 2 and await turns.claim_pending(K, limit=10, lease_s=60) == []
    assert await turns.release([r["id"] for r in mine], failed_attempt=True) == 1
    again = await turns.claim_pending(K, limit=10, lease_s=60)
    assert [r["extract_attempts"] for r in again] == [1, 1]


async def test_end_marks_ended_and_returns_pending(turns):
    await turns.append(K, [("user", "a"), ("assistant", "b")], agent_id="bot", ttl_hours=1)
    assert not await turns.is_ended(K)
    assert await turns.end(K, "bot") == 2
    assert await turns.is_ended(K)
    assert K in await turns.due_sessions(every_n=100, idle_s=3600)
    await turns.append(K, [("user", "back")], agent_id=None, ttl_hours=1)  # re-opens it
    assert not await turns.is_ended(K)


async def test_twenty_concurrent_appends_to_one_session_all_land_in_order(fresh_db):
    """8-10 appends at once collided on the unique turn index and, after five retries,
    raised (a 500); appends to one session are now serialised by a lock."""
    pool = await open_pool(fresh_db, Settings().with_(db={"pool_max": 20}), min_size=20)
    try:
        await pool.wait()
        turns = TurnStore(pool)
        for round_ in range(3):
            done = await asyncio.gather(
                *(
                    turns.append(
                        K,
                        [("user", f"r{round_} m{i} a"), ("assistant", "b")],
                        agent_id=None,
                        ttl_hours=1,
                    )
                    for i in range(20)
                )
            )
            spans = sorted((a.first_index, a.last_index) for a in done)
            base = 40 * round_
            assert spans == [(base + 2 * i + 1, base + 2 * i + 2) for i in range(20)]
        assert await turns.status(K) == TurnCounts(turns=120, pending=120, failed=0, compressed=0)
        other = await turns.append(
            SessionKey("t1", "bob", "s1"), [("user", "x")], agent_id=None, ttl_hours=1
        )
        assert other.first_index == 1  # another session's indexes are its own
    finally:
        await pool.close()
