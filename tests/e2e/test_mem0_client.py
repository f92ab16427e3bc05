"""The official ``mem0ai`` client against memserve's /mem0 routes: a mem0 user switches by
setting ``host``. Every call goes through the real client (``Authorization: Token``)."""

from __future__ import annotations

import base64
import os
import secrets
import time

import pytest

from serve_app.testing.document_server import DocumentServer
from serve_app.testing.llm_server import decision, extraction, memory, shown
from serve_app.testing.pdfs import text_pdf

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mem0(tmp_path_factory):
    """The mem0 package, imported with telemetry off and its config dir in a temp dir."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(tmp_path_factory.mktemp("mem0"))
    import mem0
    import mem0.exceptions

    return mem0


@pytest.fixture(scope="module")
def client_for(mem0, service):
    def make(key: str):
        return mem0.MemoryClient(api_key=key, host=f"{service.base_url}/mem0")

    return make


def conversation(uid: str) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"I'm vegetarian and allergic to nuts ({uid})"},
        {"role": "assistant", "content": f"Noted: you play the violin on Sundays ({uid})"},
    ]


def test_round_trip_with_a_service_key(client_for, keys, uid, mem0):
    c = client_for(keys.service)
    added = c.add(conversation(uid), user_id=uid, infer=False, metadata={"src": "test"})
    assert added["status"] == "SUCCEEDED" and len(added["results"]) == 2
    veg, violin = (r["id"] for r in added["results"])

    hits = c.search("what food can't I eat?", filters={"user_id": uid}, top_k=2)["results"]
    assert hits[0]["id"] == veg and hits[0]["user_id"] == uid and 0 < hits[0]["score"] <= 1
    assert hits[0]["metadata"] == {"src": "test"}
    filtered = c.search("music", filters={"AND": [{"user_id": uid}, {"metadata": {"src": "x"}}]})
    assert filtered["results"] == []

    page = c.get_all(filters={"user_id": uid}, page=1, page_size=1)
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    assert {m["id"] for m in c.get_all(filters={"user_id": uid})["results"]} == {veg, violin}

    assert c.get(violin)["memory"].startswith("Noted: you play the violin")
    updated = c.update(violin, text=f"Plays the cello on Sundays ({uid})")
    assert updated["memory"].startswith("Plays the cello")
    assert c.search("which instrument?", filters={"user_id": uid})["results"][0]["id"] == violin
    events = c.history(violin)
    assert [e["event"] for e in events] == ["ADD", "UPDATE"]
    assert events[1]["new_memory"].startswith("Plays the cello")

    assert c.delete(violin)["message"]
    with pytest.raises(mem0.exceptions.MemoryNotFoundError):
        c.get(violin)
    assert c.delete_all(user_id=uid)["deleted"] == 1
    assert c.get_all(filters={"user_id": uid})["count"] == 0


def test_batch_and_entities(client_for, keys, uid, mem0):
    c = client_for(keys.service)
    ids = [
        r["id"]
        for r in c.add(conversation(uid), user_id=uid, agent_id="chef", infer=False)["results"]
    ]
    c.batch_update([{"memory_id": ids[0], "text": f"Eats fish now ({uid})"}])
    assert c.get(ids[0])["memory"] == f"Eats fish now ({uid})"
    assert c.get(ids[0])["agent_id"] == "chef"
    entities = c.users()["results"]
    mine = [e for e in entities if e["name"] == uid]
    assert mine and mine[0]["type"] == "user" and mine[0]["total_memories"] == 2
    assert any(e["type"] == "agent" and e["name"] == "chef" for e in entities)
    c.batch_delete([{"memory_id": ids[0]}])
    assert c.get_all(filters={"user_id": uid})["count"] == 1
    with pytest.raises(mem0.exceptions.MemoryNotFoundError):  # nothing left to delete
        c.batch_delete([{"memory_id": ids[0]}])
    c.delete_users(user_id=uid)
    assert c.get_all(filters={"user_id": uid})["count"] == 0


def test_isolation(client_for, keys, mem0):
    alice, bob = client_for(keys.alice), client_for(keys.bob)
    secret = f"alice's locker code is {secrets.randbelow(10**6)}"
    [mid] = [r["id"] for r in alice.add(secret, infer=False)["results"]]  # bound to alice
    assert alice.get(mid)["user_id"] == "alice"
    other_tenant = client_for(keys.service_t2)
    for c in (bob, other_tenant):
        with pytest.raises(mem0.exceptions.MemoryNotFoundError):
            c.get(mid)
        with pytest.raises(mem0.exceptions.MemoryNotFoundError):
            c.update(mid, text="pwned")
        with pytest.raises(mem0.exceptions.MemoryNotFoundError):
            c.history(mid)
        with pytest.raises(mem0.exceptions.MemoryNotFoundError):
            c.batch_delete([{"memory_id": mid}])
        with pytest.raises(mem0.exceptions.MemoryNotFoundError):
            c.delete(mid)
    with pytest.raises(mem0.exceptions.AuthenticationError):  # a user key names only itself
        bob.search("locker code", filters={"user_id": "alice"})
    with pytest.raises(mem0.exceptions.MemoryNotFoundError):
        bob.delete_users(user_id="alice")
    seen = bob.search("locker code", filters={"user_id": "bob"})["results"]
    seen += other_tenant.search("locker code", filters={"user_id": "alice"})["results"]
    assert all(m["id"] != mid for m in seen)
    assert all(e["name"] != "alice" for e in bob.users()["results"] if e["type"] == "user")
    assert alice.get(mid)["memory"] == secret  # untouched
    alice.delete(mid)


def test_bad_key_is_refused_at_construction(client_for):
    with pytest.raises(ValueError):
        client_for("msk_not_a_key_" + secrets.token_hex(8))


def test_infer_reports_mem0_event_list(client_for, keys, fake_llm, uid):
    """mem0's add with inference answers its event list: ADD, then UPDATE (with
    previous_memory) and DELETE decided by the model against the memories it was shown."""
    c = client_for(keys.service)
    home, moved = f"The user lives in Paris-{uid}", f"The user lives in Berlin-{uid}"
    trip = f"The user plans a trip to Rome-{uid}"
    fake_llm.add_rule(f"paris-{uid}", extraction([memory(home), memory(trip)]))
    added = c.add(
        [{"role": "user", "content": f"I live in paris-{uid}, Rome trip in May"}], user_id=uid
    )
    assert added["status"] == "SUCCEEDED" and added["event_id"]
    ids = {r["memory"]: r["id"] for r in added["results"]}
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"] and set(ids) == {home, trip}

    def reconcile(kind: str, messages: list[dict]) -> str | None:
        aliases = {text: alias for alias, text in shown(messages).items()}
        if kind != "extract" or home not in aliases:
            return None
        return extraction(
            [
                decision("UPDATE", aliases[home], moved, "moved"),
                decision("INVALIDATE", aliases[trip], reason="cancelled"),
            ]
        )

    fake_llm.add_responder(reconcile)
    changed = c.add(f"I moved to berlin-{uid} and cancelled Rome", user_id=uid)
    assert changed["status"] == "SUCCEEDED"
    by_event = {r["event"]: r for r in changed["results"]}
    assert set(by_event) == {"UPDATE", "DELETE"}
    assert by_event["UPDATE"]["memory"] == moved
    assert by_event["UPDATE"]["previous_memory"] == home
    assert by_event["DELETE"]["id"] == ids[trip]
    current = [m["memory"] for m in c.get_all(filters={"user_id": uid})["results"]]
    assert current == [moved]  # retired memories are not current
    assert c.history(ids[trip])[-1]["event"] == "DELETE"


def test_infer_with_the_llm_down_answers_pending_then_extracts(client_for, keys, fake_llm, uid):
    fake_llm.add_rule(f"ukulele-{uid}", extraction([memory(f"Plays the ukulele-{uid}")]))
    c = client_for(keys.service)
    fake_llm.down()
    try:
        queued = c.add(
            [{"role": "user", "content": f"I play the ukulele-{uid} every day"}], user_id=uid
        )
    finally:
        fake_llm.up()
    assert queued["status"] == "PENDING" and queued["event_id"] and queued["results"] == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = c.get_all(filters={"user_id": uid})["results"]
        if got:
            break
        time.sleep(0.3)
    assert [m["memory"] for m in got] == [f"Plays the ukulele-{uid}"]


def test_document_messages_become_documents(client_for, keys, uid, mem0):
    """mem0's multimodal document messages: a pdf_url from a document server (127.0.0.2,
    the one network the test service allows), an mdx_url as base64; an image is refused
    with a message naming the missing vision model, a private URL as refused."""
    md = b"# Travel policy\n\nEconomy class for flights under six hours.\n"
    server = DocumentServer(
        host="127.0.0.2", files={"/policy.pdf": ("application/pdf", text_pdf(["Taxis: 40 EUR."]))}
    ).start()
    try:
        c = client_for(keys.service)
        added = c.add(
            [
                {
                    "role": "user",
                    "content": {"type": "pdf_url", "pdf_url": {"url": server.url("/policy.pdf")}},
                },
                {
                    "role": "user",
                    "content": {
                        "type": "mdx_url",
                        "mdx_url": {"url": base64.b64encode(md).decode()},
                    },
                },
            ],
            user_id=uid,
        )
        assert added["status"] == "SUCCEEDED"
        pdf, mdx = (r["document"] for r in added["results"])
        assert (pdf["content_type"], pdf["user_id"], pdf["scope"]) == (
            "application/pdf",
            uid,
            "user",
        )
        assert mdx["content_type"] == "text/markdown" and mdx["chunk_count"] >= 1
        assert server.hits == ["/policy.pdf"]

        image = {"type": "image_url", "image_url": {"url": "https://example.com/pizza.jpg"}}
        with pytest.raises(mem0.exceptions.ValidationError) as info:
            c.add([{"role": "user", "content": image}], user_id=uid)
        assert "vision model" in str(info.value.details or info.value)
        private = {"type": "pdf_url", "pdf_url": {"url": "http://169.254.169.254/latest/"}}
        with pytest.raises(mem0.exceptions.ValidationError) as info:
            c.add([{"role": "user", "content": private}], user_id=uid)
        assert "url_refused" in str(info.value.details or info.value)
    finally:
        server.stop()
