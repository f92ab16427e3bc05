"""Forget under faults: a DB error mid-chunk, a dropped connection, a cancelled caller and
a dead process leave no erasure that blocks later work; a retried forget completes.

Real PostgreSQL, the real encoder and the extraction pipeline with the scripted LLM:
after each fault, new turns of the forgotten user are extracted again. Faults are
injected with a statement trigger on ``memory_items`` that fires on the N-th delete
chunk (raise, or sleep so the test can cut the forget there).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import psycopg
import pytest

from serve_app.store import NewMemory, Owner
from serve_app.store.erasure import Erasure, prune
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.guarded import ForgetInProgress, GuardedWriter
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.conftest import REPO
from tests.serve_app.extraction.conftest import (  # noqa: F401
    encoder,
    make_harness,
)
from tests.serve_app.extraction.conftest import test_settings as settings_for
from tests.serve_app.store.seeding import run, seed_memories

ALICE = Scope("t1", "alice")
LEASE_S = 1.5  # a short erasure lease: a dead forget stops blocking after this


async def seed(h, encoder, user: str, n: int) -> None:  # noqa: F811
    await seed_memories(h.pool, encoder.spec.table_slug, encoder.spec.dim, user, n)


async def fault_on_chunk(h, n: int, action: str, *, on: str = "=") -> None:
    """Run ``action`` (PL/pgSQL) in the ``n``-th DELETE statement on memory_items (once:
    a retry's chunks come later; ``on=">="``: in that one and every later one)."""
    await run(h.pool, "CREATE SEQUENCE fault_chunks")
    await run(
        h.pool,
        "CREATE FUNCTION fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF nextval('fault_chunks') {on} {n} THEN {action}; END IF; RETURN NULL; END $$",
    )
    await run(
        h.pool,
        "CREATE TRIGGER fault BEFORE DELETE ON memory_items"
        " FOR EACH STATEMENT EXECUTE FUNCTION fault()",
    )


async def sleeping_backend(h) -> int:
    """The pid of the backend sleeping in the fault trigger (waits for it)."""
    for _ in range(400):
        rows = await run(
            h.pool,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event = 'PgSleep'",
        )
        if rows:
            return rows[0]["pid"]
        await asyncio.sleep(0.025)
    raise AssertionError("the forget never reached its faulty chunk")


async def erasures(h) -> list[dict]:
    return await run(h.pool, "SELECT id, finished_at, lease_until FROM memory_erasures ORDER BY id")


async def memories(h, user: str = "alice") -> list[str]:
    rows = await run(
        h.pool, "SELECT content FROM memory_items WHERE user_id = %s ORDER BY content", user
    )
    return [r["content"] for r in rows]


async def extracted(h, fake_llm, session: str) -> list[str]:  # noqa: F811
    """Tell alice's new session something; what extraction stored from it."""
    text = f"The user plays the cello ({session})"
    fake_llm.add_rule(session, extraction([memory(text)]))
    key = SessionKey("t1", "alice", session)
    await h.say(key, ("user", f"I play the cello, {session}"), ("assistant", "Lovely."))
    await h.pipeline.process_session(key)
    rows = await run(
        h.pool, "SELECT content FROM memory_items WHERE user_id = 'alice' AND content = %s", text
    )
    return [r["content"] for r in rows]


async def harness(make_harness, fake_llm):  # noqa: F811
    return await make_harness(settings_for(fake_llm.url))


async def _db_error(h, forget) -> None:
    with pytest.raises(psycopg.errors.RaiseException):
        await forget


async def _connection_terminated(h, forget) -> None:
    task = asyncio.create_task(forget)
    await run(h.pool, "SELECT pg_terminate_backend(%s)", await sleeping_backend(h))
    with pytest.raises(psycopg.OperationalError):  # the erasure is finished on another
        await task


async def _caller_cancelled(h, forget) -> None:
    """An HTTP client that hangs up: the request's task is cancelled."""
    task = asyncio.create_task(forget)
    await sleeping_backend(h)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("fault", "cut"),
    [
        ("RAISE EXCEPTION 'injected fault'", _db_error),
        ("PERFORM pg_sleep(4)", _connection_terminated),
        ("PERFORM pg_sleep(4)", _caller_cancelled),
    ],
    ids=["db-error", "connection-terminated", "caller-cancelled"],
)
async def test_an_interrupted_forget_finishes_its_erasure_and_a_retry_completes(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
    fault,
    cut,
):
    h = await harness(make_harness, fake_llm)
    await seed(h, encoder, "alice", 7)
    await fault_on_chunk(h, 2, fault)
    store = ForgetStore(h.pool, encoder.spec.table_slug, batch=3, lease_s=60)
    await cut(h, store.forget(ALICE))
    assert len(await memories(h)) == 4  # the first chunk committed, the second did not
    [row] = await erasures(h)
    assert row["finished_at"] is not None  # finished although the forget was cut
    assert await extracted(h, fake_llm, "s-after") != []  # new work is not blocked
    counts = await store.forget(ALICE)  # the retry deletes the rest and says how much
    assert counts["memories"] == 4 + 1 and await memories(h) == []
    assert all(r["finished_at"] is not None for r in await erasures(h))


async def test_a_running_forget_renews_its_lease_between_chunks(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
):
    h = await harness(make_harness, fake_llm)
    await seed(h, encoder, "alice", 18)
    await fault_on_chunk(h, 1, "PERFORM pg_sleep(0.3)", on=">=")  # 7 chunks: ~2.1 s
    store = ForgetStore(h.pool, encoder.spec.table_slug, batch=3, lease_s=1.0)
    task = asyncio.create_task(store.forget(ALICE))
    await asyncio.sleep(1.6)  # past the first lease: only renewals keep it live
    live = await run(
        h.pool, "SELECT finished_at IS NULL AND lease_until > now() AS live FROM memory_erasures"
    )
    counts = await task
    assert live == [{"live": True}]  # still blocking new work: the forget is running
    assert counts["memories"] == 18
    [row] = await erasures(h)
    assert row["finished_at"] is not None


# A forget in a process of its own, killed mid-chunk (a replica that dies): its
# erasure stays unfinished; only its lease can end it.
_FORGET_PROCESS = """
import asyncio, sys
from serve_app.db.pool import open_pool
from serve_app.settings import Settings
from serve_app.store.forget import ForgetStore, Scope

async def main():
    pool = await open_pool(sys.argv[1], Settings(), min_size=1)
    await pool.wait()
    store = ForgetStore(pool, sys.argv[2], batch=3, lease_s=float(sys.argv[3]))
    await store.forget(Scope("t1", "alice"))

asyncio.run(main())
"""


async def kill_a_forget_mid_chunk(h, fresh_db: str, slug: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _FORGET_PROCESS,
        fresh_db,
        slug,
        str(LEASE_S),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        pid = await sleeping_backend(h)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    # The server drops the dead client's session (it would notice at its next write).
    await run(h.pool, "SELECT pg_terminate_backend(%s)", pid)


async def test_a_dead_forgets_erasure_stops_blocking_when_its_lease_runs_out(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
    fresh_db,
):
    h = await make_harness(settings_for(fake_llm.url, llm={"timeout_s": 10.0}))
    await seed(h, encoder, "alice", 7)
    await fault_on_chunk(h, 2, "PERFORM pg_sleep(4)")
    await kill_a_forget_mid_chunk(h, fresh_db, encoder.spec.table_slug)
    [row] = await erasures(h)
    assert row["finished_at"] is None  # nobody finished it: the process is gone
    # Work begun while the lease is live is voided (the forget may have been running):
    # its LLM answer arrives after the lease ran out and is still not written.
    fake_llm.set_mode("delay", LEASE_S + 0.5)
    assert await extracted(h, fake_llm, "s-during-lease") == []
    fake_llm.set_mode("ok")
    rows = await run(h.pool, "SELECT lease_until < now() AS over FROM memory_erasures")
    assert rows == [{"over": True}]
    # Work begun after the lease ran out is not blocked, with no retry needed.
    assert await extracted(h, fake_llm, "s-after-lease") != []
    # A retry finishes the dead erasure at its lease expiry and deletes what is left.
    counts = await ForgetStore(h.pool, encoder.spec.table_slug, batch=3).forget(ALICE)
    assert counts["memories"] == 4 + 1 and await memories(h) == []
    dead, retry = await erasures(h)
    assert dead["finished_at"] == dead["lease_until"]
    assert retry["finished_at"] is not None


async def test_a_retry_takes_over_a_dead_forgets_live_erasure(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
    fresh_db,
):
    h = await harness(make_harness, fake_llm)
    await seed(h, encoder, "alice", 7)
    await fault_on_chunk(h, 2, "PERFORM pg_sleep(4)")
    await kill_a_forget_mid_chunk(h, fresh_db, encoder.spec.table_slug)
    store = ForgetStore(h.pool, encoder.spec.table_slug, batch=3, lease_s=60)
    counts = await store.forget(ALICE)  # at once, while the dead one's lease is live
    assert counts["memories"] == 4 and await memories(h) == []
    [row] = await erasures(h)  # taken over, not a second record beside a live one
    assert row["finished_at"] is not None
    assert await extracted(h, fake_llm, "s-after-retry") != []  # no wait for the lease


async def test_api_writes_are_refused_by_a_dead_forget_only_until_its_lease_runs_out(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
):
    h = await harness(make_harness, fake_llm)
    writer = GuardedWriter(h.pool, encoder.spec.table_slug)
    items, vectors = [NewMemory("The user sails")], encoder.encode(["The user sails"])
    async with h.pool.connection() as conn:  # a forget whose replica died at once
        await Erasure.start(conn, "t1", "alice", lease_s=0.5)
    with pytest.raises(ForgetInProgress):
        await writer.add(Owner("t1", "alice"), items, vectors)
    await asyncio.sleep(0.6)
    assert len(await writer.add(Owner("t1", "alice"), items, vectors)) == 1


async def test_prune_drops_erasures_whose_lease_ran_out_long_ago(
    make_harness,  # noqa: F811
    fake_llm,  # noqa: F811
    encoder,  # noqa: F811
):
    h = await harness(make_harness, fake_llm)
    async with h.pool.connection() as conn:
        await Erasure.start(conn, "t1", "alice", lease_s=0.2)  # never finished
        live = await Erasure.start(conn, "t1", "bob", lease_s=60)
        await asyncio.sleep(0.4)
        assert await prune(conn, keep_s=0.1) == 1
        assert await prune(conn, keep_s=0.1) == 0  # bob's is running
        await live.finish(conn)
    assert len(await erasures(h)) == 1
