"""Memories know when they were true, end to end over HTTP through Ray Serve: supersedes
and PATCH valid_until leave every replica's hot cache at once, as_of shows the past, and
the dates of turns (sessions API and chat proxy) reach the extraction prompt and the
extracted memories' valid_from."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from serve_app.testing.llm_server import extraction, memory
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e


def contents(r: httpx.Response) -> list[str]:
    assert r.status_code == 200, r.text
    body = r.json()
    return [m["content"] for m in body.get("results", body.get("memories", []))]


def test_supersedes_patch_and_as_of_through_the_cluster(api, service, keys, uid):
    ask = {"user_id": uid, "query": f"where does {uid} live?"}
    paris = api.post(
        "/v1/memories",
        json={
            "user_id": uid,
            "content": f"{uid} lives in Paris",
            "valid_from": "2025-01-01T00:00:00Z",
        },
    )
    assert paris.status_code == 201, paris.text
    for _ in range(3):  # warm the retriever's cache for the user
        assert contents(api.post("/v1/search", json=ask)) == [f"{uid} lives in Paris"]
    berlin = api.post(
        "/v1/memories",
        json={
            "user_id": uid,
            "content": f"{uid} lives in Berlin",
            "valid_from": "2026-06-01T00:00:00Z",
            "supersedes": [paris.json()["id"]],
        },
    )
    assert berlin.status_code == 201, berlin.text
    assert contents(api.post("/v1/search", json=ask)) == [f"{uid} lives in Berlin"]
    ctx = api.post("/v1/context", json=ask).json()["context"]
    assert "Berlin" in ctx and "Paris" not in ctx
    past = api.post("/v1/search", json={**ask, "as_of": "2025-12-31T00:00:00Z"})
    assert contents(past) == [f"{uid} lives in Paris"]
    old = api.get(f"/v1/memories/{paris.json()['id']}", params={"user_id": uid}).json()
    assert old["superseded_by"] == berlin.json()["id"]
    # PATCH valid_until retires the current value too: nothing is valid now.
    r = api.patch(
        f"/v1/memories/{berlin.json()['id']}",
        params={"user_id": uid},
        json={"valid_until": "2026-10-01T00:00:00Z"},
    )
    assert r.status_code == 200, r.text
    assert contents(api.post("/v1/search", json=ask)) == []
    assert len(contents(api.post("/v1/search", json={**ask, "include_invalidated": True}))) == 2
    assert contents(api.get("/v1/memories", params={"user_id": uid})) == []


def test_supersedes_of_someone_elses_memory_is_404_and_writes_nothing(service, keys):
    with client_for(service, keys.bob) as bob, client_for(service, keys.alice) as alice:
        secret = bob.post("/v1/memories", json={"content": "bob's PIN is 1234"})
        assert secret.status_code == 201, secret.text
        before = contents(alice.get("/v1/memories", params={"include_invalidated": "true"}))
        for target in (secret.json()["id"], str(uuid.uuid4())):
            r = alice.post("/v1/memories", json={"content": "mine", "supersedes": [target]})
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        after = contents(alice.get("/v1/memories", params={"include_invalidated": "true"}))
        assert after == before
        mine = bob.get(f"/v1/memories/{secret.json()['id']}").json()
        assert mine["valid_until"] is None and mine["superseded_by"] is None


def wait_for_memories(api, uid: str) -> list[dict]:
    """The user's memories once extraction wrote one (and the session's summary, if any)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = api.get("/v1/memories", params={"user_id": uid}).json()["memories"]
        if any(r["source"] == "extraction" for r in rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"nothing extracted for {uid}")


def test_turn_dates_reach_the_prompt_and_valid_from(api, service, fake_llm, uid):
    fake_llm.add_rule(
        f"Ana-{uid}", extraction([memory(f"The user met Ana-{uid} on 2026-11-17", "episodic")])
    )
    r = api.post(
        f"/v1/sessions/s-{uid}/turns",
        json={
            "user_id": uid,
            "messages": [
                {
                    "role": "user",
                    "content": f"I met Ana-{uid} last Tuesday",
                    "occurred_at": "2026-11-19T18:00:00Z",
                }
            ],
        },
    )
    assert r.status_code == 202, r.text
    assert api.post(f"/v1/sessions/s-{uid}/end", json={"user_id": uid}).status_code == 202
    [m] = [m for m in wait_for_memories(api, uid) if m["source"] == "extraction"]
    assert m["valid_from"] == "2026-11-19T18:00:00Z"
    [call] = [c for c in fake_llm.calls("extract") if f"Ana-{uid}" in str(c["messages"])]
    prompt = call["messages"][-1]["content"]
    assert "Session date: Thu 2026-11-19" in prompt
    assert f"(Thu 2026-11-19) user: I met Ana-{uid} last Tuesday" in prompt


def test_chat_proxy_occurred_at_is_recorded_with_the_turn(api, service, keys, fake_llm, uid):
    fake_llm.add_rule(f"oboe-{uid}", extraction([memory(f"The user bought an oboe-{uid}")]))
    body = {
        "model": "fake",
        "user": uid,
        "messages": [{"role": "user", "content": f"Yesterday I bought an oboe-{uid}"}],
    }
    headers = {"X-Memserve-Session": f"c-{uid}", "X-Memserve-Occurred-At": "2026-11-18T09:00:00Z"}
    r = api.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    bad = api.post(
        "/v1/chat/completions",
        json=body,
        headers={**headers, "X-Memserve-Occurred-At": "next week"},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    deadline = time.monotonic() + 10
    while api.get(f"/v1/sessions/c-{uid}", params={"user_id": uid}).status_code != 200:
        assert time.monotonic() < deadline, "the chat turn was not recorded"
        time.sleep(0.1)
    assert api.post(f"/v1/sessions/c-{uid}/end", json={"user_id": uid}).status_code == 202
    [m] = [m for m in wait_for_memories(api, uid) if m["source"] == "extraction"]
    assert m["valid_from"] == "2026-11-18T09:00:00Z"
    [call] = [c for c in fake_llm.calls("extract") if f"oboe-{uid}" in str(c["messages"])]
    assert (
        f"(Wed 2026-11-18) user: Yesterday I bought an oboe-{uid}"
        in call["messages"][-1]["content"]
    )
