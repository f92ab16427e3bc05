"""The OpenAI-compatible chat proxy, driven with the official `openai` client.

The upstream is the scripted fake LLM (serve_app/testing/llm_server.py) the e2e
service is configured with (MEMSERVE_LLM_BASE_URL); it is scripted and
inspected in-process (the ``fake_llm`` fixture).
"""

from __future__ import annotations

import secrets
import time

import openai
import pytest

from serve_app.text import CONTEXT_OPEN
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.e2e
ANSWER = "Your favourite colour is teal."


@pytest.fixture
def llm(service, fake_llm):
    assert service.env()["MEMSERVE_LLM_BASE_URL"] == fake_llm.url
    return fake_llm


def chat_calls(llm) -> list[dict]:
    return llm.calls("chat")


def openai_client(service, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{service.base_url}/v1", api_key=key, max_retries=0)


def wait_turns(api, uid: str, sid: str, n: int) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = api.get(f"/v1/sessions/{sid}", params={"user_id": uid})
        if r.status_code == 200 and r.json()["turns"] >= n:
            return r.json()
        time.sleep(0.2)
    raise AssertionError(f"turns of {sid} not recorded: {r.status_code} {r.text}")


def test_non_streaming_injects_context_and_records_turn(service, api, keys, llm, uid):
    api.post("/v1/memories", json={"user_id": uid, "content": "My favourite colour is teal"})
    llm.add_rule("favourite colour is teal", ANSWER, kind="chat", times=1)
    before = len(chat_calls(llm))
    client = openai_client(service, keys.service)
    out = client.chat.completions.create(
        model="fake",
        messages=[
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is my favourite colour?"},
        ],
        user=uid,
        extra_headers={"X-Memserve-Session": "chat-s1"},
    )
    assert out.choices[0].message.content == ANSWER
    sent = chat_calls(llm)[before]["messages"]
    assert sent[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert sent[1]["role"] == "system" and sent[1]["content"].startswith(CONTEXT_OPEN)
    assert "favourite colour is teal" in sent[1]["content"]
    assert sent[2] == {"role": "user", "content": "What is my favourite colour?"}
    status = wait_turns(api, uid, "chat-s1", 2)
    assert status["turns"] == 2


def test_streaming_with_a_user_key(service, keys, llm, api):
    api.post("/v1/memories", json={"user_id": "bob", "content": "Bob's cat is named Miso"})
    before = len(chat_calls(llm))
    client = openai_client(service, keys.bob)
    stream = client.chat.completions.create(
        model="fake",
        messages=[{"role": "user", "content": "What is my cat's name?"}],
        stream=True,
        metadata={"session_id": "chat-stream"},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
    sent = chat_calls(llm)[before]["messages"]
    assert sent[0]["content"].startswith(CONTEXT_OPEN) and "Miso" in sent[0]["content"]
    wait_turns(api, "bob", "chat-stream", 2)


def test_no_other_users_memories_in_the_prompt(service, keys, llm, api, uid):
    api.post("/v1/memories", json={"user_id": uid, "content": "My locker code is 9917"})
    before = len(chat_calls(llm))
    client = openai_client(service, keys.alice)
    client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "What is my locker code?"}]
    )
    sent = chat_calls(llm)[before]["messages"]
    assert "9917" not in str(sent)
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "hi"}], user=uid
        )


def test_errors(service, keys):
    with pytest.raises(openai.AuthenticationError):
        openai_client(service, "msk_wrong").chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "hi"}]
        )
    with client_for(service, keys.service) as c:
        r = c.post("/v1/chat/completions", json={"model": "x", "messages": []})
        assert r.status_code == 422
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400  # a service key must name the user


def test_a_client_that_leaves_mid_stream_still_has_its_turn_and_use_recorded(service, llm, uid):
    """Through Ray Serve: the client goes away after the first piece of a slow stream; the
    replica's relay is cancelled, and still records the turn and counts the call."""
    key = service.add_key("msk_" + secrets.token_hex(16), "default", "service")
    body = {"user": uid, "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    llm.set_mode("slow_stream", delay_s=0.5)  # ~2.5 s for the whole answer
    try:
        with client_for(service, key) as c:
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith("data: {") and '"content": "T' in line:
                        break  # the first piece of the answer: leave
            status = wait_turns(c, uid, "chat", 2)
            assert status["turns"] == 2
            deadline = time.monotonic() + 10  # another replica sees it once it is flushed
            while not (rows := c.get("/v1/chat/usage").json()["usage"]):
                assert time.monotonic() < deadline, "the call was not counted"
                time.sleep(0.2)
            assert rows[0]["requests"] == 1 and rows[0]["completion_tokens"] > 0, rows
    finally:
        llm.set_mode("ok")
