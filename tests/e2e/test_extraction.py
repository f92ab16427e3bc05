"""Extraction over HTTP: the real service, its Extractor deployment and the scripted LLM."""

from __future__ import annotations

import time

import pytest

from serve_app.testing.llm_server import extraction, fact, memory

pytestmark = pytest.mark.e2e


def wait_for(fn, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def memories(api, uid: str) -> list[dict]:
    r = api.get("/v1/memories", params={"user_id": uid})
    assert r.status_code == 200, r.text
    return r.json()["memories"]


def settled(api, uid: str, sid: str) -> dict | None:
    """The session's status once none of its turns waits for extraction."""
    status = api.get(f"/v1/sessions/{sid}", params={"user_id": uid}).json()
    return status if status["pending_turns"] == 0 else None


def turns(api, uid: str, sid: str, *messages: tuple[str, str]):
    r = api.post(
        f"/v1/sessions/{sid}/turns",
        json={"user_id": uid, "messages": [{"role": a, "content": b} for a, b in messages]},
    )
    assert r.status_code == 202, r.text
    return r.json()


def test_readiness_reports_extraction(service, api):
    body = api.get("/readyz").json()
    assert body["components"]["extraction"] == "ok"


def test_every_n_user_turns_extracts_searchable_memories(api, fake_llm, uid):
    fake_llm.add_rule(
        f"marathon-{uid}",
        extraction(
            [
                memory(
                    f"The user is training for the Berlin marathon-{uid} in September", "episodic"
                )
            ],
            [fact("preference", "sport", "running")],
        ),
    )
    first = turns(api, uid, "s1", ("user", "hello"), ("assistant", "Hi! How can I help?"))
    assert first["extraction"] == "buffered" and first["turn_range"] == [1, 2]
    turns(api, uid, "s1", ("user", "any tips?"), ("user", "for running"))
    last = turns(api, uid, "s1", ("user", f"I'm training for the Berlin marathon-{uid}"))
    assert last["extraction"] == "scheduled"  # the 4th user turn
    [m] = wait_for(lambda: memories(api, uid), what="extracted memory")
    assert m["type"] == "episodic" and m["source"] == "extraction"
    r = api.post("/v1/search", json={"user_id": uid, "query": "which marathon is the user doing?"})
    assert r.json()["results"][0]["id"] == m["id"]
    # the batch's turns are stamped after its memories and facts are written: once they are,
    # everything the batch wrote is there
    status = wait_for(lambda: settled(api, uid, "s1"), what="the batch's turns stamped")
    assert status["turns"] == 5
    facts = api.get("/v1/facts", params={"user_id": uid}).json()["facts"]
    assert [(f["key"], f["value"]) for f in facts] == [("sport", "running")]


def test_contradiction_and_facts_history_over_http(api, fake_llm, uid):
    fake_llm.add_rule(
        f"name is Alex {uid}", extraction(facts=[fact("identity", "name", "Alex", 0.9)])
    )
    fake_llm.add_rule(
        f"call me Sam {uid}", extraction(facts=[fact("identity", "name", "Sam", 0.95)])
    )
    turns(api, uid, "s1", ("user", f"my name is Alex {uid}"))
    api.post("/v1/sessions/s1/end", json={"user_id": uid})
    wait_for(lambda: api.get("/v1/facts", params={"user_id": uid}).json()["facts"], what="fact")
    turns(api, uid, "s2", ("user", f"please call me Sam {uid}"))
    r = api.post("/v1/sessions/s2/end", json={"user_id": uid})
    assert r.status_code == 202 and r.json()["pending_turns"] == 1

    def active_is_sam():
        facts = api.get("/v1/facts", params={"user_id": uid}).json()["facts"]
        return [f["value"] for f in facts] == ["Sam"]

    wait_for(active_is_sam, what="Sam replaces Alex")
    history = api.get("/v1/facts", params={"user_id": uid, "include_inactive": "true"}).json()
    assert [(f["value"], f["active"]) for f in history["facts"]] == [("Alex", False), ("Sam", True)]


def test_infer_true_goes_through_extraction(api, fake_llm, uid):
    fake_llm.add_rule(f"peanuts {uid}", extraction([memory("The user is allergic to peanuts")]))
    r = api.post(
        "/v1/memories",
        json={
            "user_id": uid,
            "content": f"I can't eat peanuts {uid}",
            "infer": True,
            "tags": ["health"],
        },
    )
    assert r.status_code == 202, r.text
    job = r.json()["job_id"]
    assert r.json()["status"] == "queued"
    [m] = wait_for(lambda: memories(api, uid), what="inferred memory")
    assert m["content"] == "The user is allergic to peanuts" and m["tags"] == ["health"]
    wait_for(lambda: settled(api, uid, job), what="the inferred turn stamped")


def test_junk_is_not_extracted_over_http(api, fake_llm, uid):
    from serve_app.text import wrap_context

    before = len(fake_llm.calls("extract"))
    turns(
        api,
        uid,
        "s1",
        ("system", f"SYSTEM-{uid}"),
        ("user", wrap_context(f"- CONTEXT-{uid}") + f" hi there {uid}"),
    )
    api.post("/v1/sessions/s1/end", json={"user_id": uid})
    wait_for(
        lambda: api.get("/v1/sessions/s1", params={"user_id": uid}).json()["pending_turns"] == 0,
        what="extraction",
    )
    sent = [c for c in fake_llm.calls("extract")[before:] if uid in str(c["messages"])]
    assert sent, "the user's words were extracted"
    prompt = str(sent[-1]["messages"])
    assert f"SYSTEM-{uid}" not in prompt and f"CONTEXT-{uid}" not in prompt


def test_llm_outage_loses_no_turn(api, fake_llm, uid):
    fake_llm.add_rule(f"bike-{uid}", extraction([memory(f"The user rides a bike-{uid}")]))
    fake_llm.down()
    try:
        r = turns(api, uid, "s1", ("user", f"I ride my bike-{uid} to work"))
        api.post("/v1/sessions/s1/end", json={"user_id": uid})
        time.sleep(2.0)  # the extractor tries, fails, keeps the turn
        status = api.get("/v1/sessions/s1", params={"user_id": uid}).json()
        assert status["pending_turns"] == 1 and memories(api, uid) == []
        assert r["accepted"] == 1
    finally:
        fake_llm.up()
    [m] = wait_for(lambda: memories(api, uid), timeout=30, what="extraction after the outage")
    assert f"bike-{uid}" in m["content"]
