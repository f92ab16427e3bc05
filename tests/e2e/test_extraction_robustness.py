"""Extraction that cannot be jammed, over HTTP: poisoned batches, dead letters, admin routes.

The shared e2e service retries a refused batch after 0.3 s and 0.6 s and dead-letters it
at the third failure (MEMSERVE_EXTRACT_RETRY_BACKOFF_S in conftest.py, default
max_attempts 3); its breaker opens after 5 consecutive failures, so counting the 90
refusals below as outages would open it at once.
"""

from __future__ import annotations

import secrets
import time

import pytest

from serve_app.testing.llm_server import extraction, memory
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e
POISONED = 30
MAX_ATTEMPTS = 3  # ExtractSettings.max_attempts (not overridden in the e2e service)


@pytest.fixture(scope="module")
def admin(service):
    with client_for(service, service.admin_key) as c:
        yield c


def wait_for(fn, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def say(api, uid: str, sid: str, text: str, end: bool = True) -> None:
    turn = {"user_id": uid, "messages": [{"role": "user", "content": text}]}
    r = api.post(f"/v1/sessions/{sid}/turns", json=turn)
    assert r.status_code == 202, r.text
    if end:
        assert api.post(f"/v1/sessions/{sid}/end", json={"user_id": uid}).status_code == 202


def session(api, uid: str, sid: str) -> dict:
    r = api.get(f"/v1/sessions/{sid}", params={"user_id": uid})
    assert r.status_code == 200, r.text
    return r.json()


def extraction_line(api) -> str:
    r = api.get("/readyz")
    assert r.status_code == 200, r.text
    return r.json()["components"]["extraction"]


def dead_letters(admin, uid: str) -> list[dict]:
    r = admin.get("/v1/admin/extraction/dead-letters", params={"user_id": uid, "limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()["dead_letters"]


def test_poisoned_sessions_are_dead_lettered_without_delaying_others(api, admin, fake_llm, uid):
    flooder = "flood_" + secrets.token_hex(5)
    poison = f"POISON-{flooder}"
    fake_llm.add_rule(poison, "", kind=None, status=400, message="context too long")
    fake_llm.add_rule(f"kayak-{uid}", extraction([memory(f"The user paddles a kayak-{uid}")]))
    sids = [f"p{i}" for i in range(POISONED)]
    for sid in sids:
        say(api, flooder, sid, f"{poison} forty turns of 8000 characters in session {sid}")
    started = time.monotonic()
    say(api, uid, "normal", f"I paddle my kayak-{uid} on the river every Sunday")
    lines: list[str] = []

    def found() -> bool:
        lines.append(extraction_line(api))
        r = api.post("/v1/search", json={"user_id": uid, "query": "what boat does the user use?"})
        results = r.json()["results"]
        return bool(results) and f"kayak-{uid}" in results[0]["content"]

    wait_for(found, 30, "the normal user's memory while 30 sessions are refused")
    normal_s = time.monotonic() - started
    assert normal_s < 30

    def all_dead() -> bool:
        lines.append(extraction_line(api))
        return len(dead_letters(admin, flooder)) == POISONED

    wait_for(all_dead, 60, "every poisoned batch dead-lettered", every=0.5)
    # The breaker never opened: 4xx refusals are the request's fault, not an outage.
    # (a probe that timed out on a busy machine says "unreachable", not "circuit")
    assert "ok" in lines and not any("circuit" in line for line in lines), sorted(set(lines))
    refused = [c for c in fake_llm.calls("extract") if poison in str(c["messages"])]
    assert len(refused) == POISONED * MAX_ATTEMPTS  # every attempt counted, none more
    for row in dead_letters(admin, flooder):
        assert row["attempts"] == MAX_ATTEMPTS and row["turns"] == 1
        assert row["error"].startswith("http_4xx"), row
    assert {r["session_id"] for r in dead_letters(admin, flooder)} == set(sids)
    for sid in sids[:3]:
        status = session(api, flooder, sid)
        assert status["failed_turns"] == 1 and status["pending_turns"] == 0, status
    assert dead_letters(admin, uid) == []  # the normal user's batch was not touched
    # Nothing retries them on its own: still dead after more scans.
    time.sleep(2.5)
    assert len([c for c in fake_llm.calls("extract") if poison in str(c["messages"])]) == len(
        refused
    )

    # An admin retry puts them back; the LLM now accepts them.
    fake_llm.remove_rules(poison)
    fake_llm.add_rule(poison, extraction([memory(f"The user keeps a travel journal {flooder}")]))
    one = admin.post(
        "/v1/admin/extraction/dead-letters/retry", json={"user_id": flooder, "session_id": "p0"}
    )
    assert one.status_code == 200, one.text
    assert one.json()["retried"] == [{"user_id": flooder, "session_id": "p0"}]
    wait_for(
        lambda: (
            session(api, flooder, "p0")["failed_turns"] == 0
            and session(api, flooder, "p0")["pending_turns"] == 0
        ),
        30,
        "p0 extracted",
    )
    assert len(dead_letters(admin, flooder)) == POISONED - 1
    rest = admin.post("/v1/admin/extraction/dead-letters/retry", json={"user_id": flooder})
    assert sorted(r["session_id"] for r in rest.json()["retried"]) == sorted(sids[1:])
    wait_for(lambda: dead_letters(admin, flooder) == [], 30, "listing empty after the retry")

    def all_extracted() -> bool:
        return all(
            s["failed_turns"] == 0 and s["pending_turns"] == 0
            for s in (session(api, flooder, sid) for sid in sids)
        )

    wait_for(all_extracted, 60, "every retried session extracted", every=0.5)
    mems = api.get("/v1/memories", params={"user_id": flooder}).json()["memories"]
    assert [m["content"] for m in mems] == [f"The user keeps a travel journal {flooder}"]
    assert extraction_line(api) == "ok"


def test_admin_routes_need_an_admin_key_and_stay_in_the_tenant(service, keys, admin, uid):
    for key in (keys.service, keys.alice, keys.service_t2):
        with client_for(service, key) as c:
            assert c.get("/v1/admin/extraction/dead-letters").status_code == 403
            r = c.post("/v1/admin/extraction/dead-letters/retry", json={})
            assert r.status_code == 403
            assert c.post("/v1/admin/consolidate", json={"user_id": uid}).status_code == 403
    with client_for(service, None) as anon:
        assert anon.post("/v1/admin/consolidate", json={"user_id": uid}).status_code == 401
    assert admin.post("/v1/admin/consolidate", json={}).status_code == 422
    listed = admin.get("/v1/admin/extraction/dead-letters").json()["dead_letters"]
    assert all(isinstance(row["session_id"], str) for row in listed)
    assert admin.post("/v1/admin/extraction/dead-letters/retry", json={"user_id": uid}).json() == {
        "retried": []
    }


BLUE = [  # pairwise cosine >= 0.95 with the e2e model: near-duplicates at merge_similarity 0.9
    "The user's favourite colour is blue",
    "The user's favorite colour is blue",
    "The user's favourite color is blue",
    "The users favourite colour is blue",
    "The user's favourite colour is the colour blue",
]


def test_admin_consolidates_one_user(service, api, keys, admin, uid):
    for text in BLUE:
        r = api.post("/v1/memories", json={"user_id": uid, "content": text, "type": "preference"})
        assert r.status_code == 201, r.text
    with client_for(service, keys.service_t2) as t2:  # the same user id in another tenant
        for text in BLUE:
            assert (
                t2.post("/v1/memories", json={"user_id": uid, "content": text}).status_code == 201
            )
        r = admin.post("/v1/admin/consolidate", json={"user_id": uid})
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["memories"] == 5 and report["merged"] == 1 and report["archived"] == 4
        assert report["ms"] >= 0 and "merge" in report["steps_ms"]
        active = {"user_id": uid, "status": "active"}
        [kept] = api.get("/v1/memories", params=active).json()["memories"]
        assert kept["content"] == BLUE[-1]  # the newest wording survives
        assert kept["version"] == 2 and kept["type"] == "preference"  # one MERGE update
        archived = api.get("/v1/memories", params={"user_id": uid, "status": "archived"})
        assert sorted(m["content"] for m in archived.json()["memories"]) == sorted(BLUE[:-1])
        found = api.post("/v1/search", json={"user_id": uid, "query": "favourite colour"})
        assert [m["id"] for m in found.json()["results"]] == [kept["id"]]
        other = t2.get("/v1/memories", params=active).json()["memories"]
        assert len(other) == 5  # tenant t2's user is not the admin's to consolidate
    again = admin.post("/v1/admin/consolidate", json={"user_id": uid}).json()
    assert again["merged"] == 0 and again["archived"] == 0 and again["memories"] == 1
