"""Forget under faults over HTTP on Ray Serve: the client hangs up mid-forget, or the
Ingress replica doing it is killed. Afterwards the user's new turns are extracted again
and a retried forget completes.

The forget is held mid-chunk by a row trigger that sleeps while deleting the user's
memory "slow" (one user only: the shared service is not slowed for anyone else).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from psycopg import sql

from serve_app.testing.llm_server import extraction, memory
from tests.e2e.conftest import E2E_LLM_ENV
from tests.e2e.test_extraction import memories, turns, wait_for
from tests.ops.conftest import replica_pids

pytestmark = pytest.mark.e2e
LEASE_S = float(E2E_LLM_ENV["MEMSERVE_LIFECYCLE_ERASURE_LEASE_S"])


def db(service, query: str, *params) -> list[tuple]:
    with psycopg.connect(service.dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


@contextmanager
def slow_chunk(service, uid: str) -> Iterator[None]:
    """Deleting ``uid``'s memory "slow" sleeps 4 s (under the 5 s statement timeout)."""
    fn = sql.Identifier(f"slow_{uid}")
    with psycopg.connect(service.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF OLD.user_id = {uid} AND OLD.content = 'slow' THEN PERFORM pg_sleep(4);"
                " END IF; RETURN OLD; END $$"
            ).format(fn=fn, uid=sql.Literal(uid))
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER {fn} BEFORE DELETE ON memory_items FOR EACH ROW"
                " EXECUTE FUNCTION {fn}()"
            ).format(fn=fn)
        )
        try:
            yield
        finally:
            conn.execute(sql.SQL("DROP TRIGGER {fn} ON memory_items").format(fn=fn))
            conn.execute(sql.SQL("DROP FUNCTION {fn}()").format(fn=fn))


def seed(api, uid: str) -> None:
    for text in ("slow", "The user sails", "The user bakes bread"):
        r = api.post("/v1/memories", json={"user_id": uid, "content": text})
        assert r.status_code == 201, r.text


def wait_sleeping(service) -> None:
    """Until the forget's chunk sleeps in the trigger."""
    wait_for(
        lambda: db(
            service,
            "SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
            " AND query ILIKE '%%memory_items%%'",
        ),
        timeout=20,
        what="the forget to reach its slow chunk",
    )


def erasures(service, uid: str) -> list[tuple]:
    return db(
        service,
        "SELECT finished_at, lease_until, lease_until < now() FROM memory_erasures"
        " WHERE user_id = %s ORDER BY id",
        uid,
    )


def extracted_again(api, fake_llm, uid: str) -> None:
    """New turns of the user are extracted (the forget blocks nothing any more)."""
    text = f"The user plays chess-{uid}"
    fake_llm.add_rule(f"chess-{uid}", extraction([memory(text)]))
    turns(api, uid, "s-after", ("user", "hi"), ("user", "I have a hobby"), ("user", "a game"))
    turns(api, uid, "s-after", ("user", f"I play chess-{uid}"))
    wait_for(
        lambda: [m for m in memories(api, uid) if m["content"] == text],
        timeout=30,
        what="the new turns to be extracted",
    )


def ready(service) -> bool:
    try:
        return httpx.get(f"{service.base_url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:  # no Ingress replica yet
        return False


def forget_cut_by_the_kill(api, uid: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # its replica dies under it
        api.delete("/v1/memories", params={"user_id": uid})


def retried_forget(api, service, uid: str) -> dict:
    r = api.delete("/v1/memories", params={"user_id": uid})
    assert r.status_code == 200, r.text
    assert memories(api, uid) == []
    assert all(row[0] is not None for row in erasures(service, uid))
    return r.json()["removed"]


def test_a_client_that_hangs_up_mid_forget_leaves_nothing_blocked(api, service, fake_llm, uid):
    seed(api, uid)
    with slow_chunk(service, uid):
        client = socket.create_connection(("127.0.0.1", service.port))
        client.sendall(
            f"DELETE /v1/memories?user_id={uid} HTTP/1.1\r\nHost: memserve\r\n"
            f"Authorization: {api.headers['Authorization']}\r\n\r\n".encode()
        )
        wait_sleeping(service)
        client.close()  # the client hangs up while the forget sleeps mid-chunk
        # Finished on cancellation, or by the forget that ran on: never left running.
        wait_for(
            lambda: erasures(service, uid) and erasures(service, uid)[0][0],
            timeout=15,
            what="the erasure to be finished",
        )
    left = [m["content"] for m in memories(api, uid)]
    print(f"after the hang-up: {left} left (the slow chunk was cancelled: {'slow' in left})")
    extracted_again(api, fake_llm, uid)
    retried_forget(api, service, uid)


def test_a_replica_killed_mid_forget_blocks_only_until_its_lease_runs_out(
    api, service, fake_llm, uid
):
    seed(api, uid)
    with slow_chunk(service, uid):
        hung = threading.Thread(target=forget_cut_by_the_kill, args=(api, uid), daemon=True)
        try:
            hung.start()
            wait_sleeping(service)
            pids = replica_pids(service, "Ingress")
            assert pids
            for pid in pids:  # the replica doing the forget dies with it
                os.kill(pid, signal.SIGKILL)
        finally:
            hung.join(timeout=30)
    [(finished, _, _)] = erasures(service, uid)
    assert finished is None  # nobody finished it: its replica is gone
    # Serve replaces the replica; the dead forget's erasure stops blocking by its lease.
    wait_for(lambda: ready(service), timeout=120, what="the Ingress replica to be replaced")
    wait_for(lambda: erasures(service, uid)[0][2], timeout=LEASE_S + 10, what="lease expiry")
    extracted_again(api, fake_llm, uid)
    removed = retried_forget(api, service, uid)
    assert removed["memories"] >= 1  # what the dead forget left, and the new memory
    dead = erasures(service, uid)[0]
    assert dead[0] == dead[1]  # finished at its lease expiry by the retry
