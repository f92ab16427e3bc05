"""A group session over HTTP: the real service (Ray Serve, the Extractor deployment) and
the scripted LLM. One call records a chat of three people; each platform user's own
statements land in their own memory, a guest's in nobody's, and forgetting a speaker
takes theirs."""

from __future__ import annotations

import json

import pytest

from serve_app.testing.llm_server import extraction, fact, memory
from tests.e2e.conftest import client_for
from tests.e2e.test_extraction import memories, settled, wait_for

pytestmark = pytest.mark.e2e


def about(item: dict, alias: str) -> dict:
    return {**item, "about": alias}


def test_each_speaker_of_a_group_session_gets_their_own_memories(api, fake_llm, uid):
    bo = f"{uid}-bo"
    fake_llm.add_rule(
        f"walnuts-{uid}",
        extraction(
            [
                about(memory(f"The user goes climbing on Sundays ({uid})"), "me"),
                about(memory(f"Bo is allergic to walnuts-{uid}"), "s1"),
                about(memory(f"Sam just moved to Oslo ({uid})"), "s2"),
            ],
            [about(fact("constraint", "allergy", f"walnuts-{uid}"), "s1")],
        ),
    )
    said = [
        {"role": "user", "content": "I go climbing on Sundays"},
        {"role": "user", "content": f"I'm allergic to walnuts-{uid}", "speaker_id": bo},
        {"role": "user", "content": "I just moved to Oslo", "name": "Sam"},
        {"role": "assistant", "content": "Let's plan a walnut-free picnic"},
    ]
    r = api.post("/v1/sessions/club/turns", json={"user_id": uid, "messages": said})
    assert r.status_code == 202, r.text
    assert api.post("/v1/sessions/club/end", json={"user_id": uid}).status_code == 202
    # the batch's turns are stamped after everything it wrote for every speaker
    wait_for(lambda: settled(api, uid, "club"), what="the batch's turns stamped")
    mine = wait_for(
        lambda: [m for m in memories(api, uid) if m["source"] == "extraction"],
        what="the owner's memory",
    )
    theirs = wait_for(lambda: memories(api, bo), what="the speaker's memory")
    assert [m["content"] for m in mine] == [f"The user goes climbing on Sundays ({uid})"]
    assert [m["content"] for m in theirs] == [f"Bo is allergic to walnuts-{uid}"]
    facts = api.get("/v1/facts", params={"user_id": bo}).json()["facts"]
    assert [(f["key"], f["value"]) for f in facts] == [("allergy", f"walnuts-{uid}")]
    assert api.get("/v1/facts", params={"user_id": uid}).json()["facts"] == []
    found = api.post("/v1/search", json={"user_id": uid, "query": "Who moved to Oslo?"})
    assert all("Sam just moved" not in m["content"] for m in found.json()["results"])
    # What the model saw: the speakers and the strict schema with "about".
    [call] = [c for c in fake_llm.calls("extract") if f"walnuts-{uid}" in json.dumps(c)]
    assert "user s1 (" in call["messages"][1]["content"]
    # Forgetting Bo takes what the group session stored for Bo, not the owner's.
    gone = api.delete("/v1/memories", params={"user_id": bo})
    assert gone.status_code == 200 and gone.json()["removed"]["turns"] == 1
    assert memories(api, bo) == []
    assert len([m for m in memories(api, uid) if m["source"] == "extraction"]) == 1


def test_a_user_key_cannot_speak_for_another_user(service, keys):
    with client_for(service, keys.alice) as alice:
        said = {"role": "user", "content": "I love walnuts", "speaker_id": "bob"}
        r = alice.post("/v1/sessions/club/turns", json={"messages": [said]})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "forbidden"
