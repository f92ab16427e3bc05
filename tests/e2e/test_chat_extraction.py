"""Turns the chat proxy records are extracted like any other: end to end over HTTP.

Four chat completions through the proxy (the official `openai` client) record four user
turns in the session; the fourth schedules extraction (MEMSERVE_EXTRACT_EVERY_N_TURNS
default 4), the scripted LLM's extraction answer becomes a searchable memory.
"""

from __future__ import annotations

import time

import openai
import pytest

from serve_app.testing.llm_server import DEFAULT_CHAT_ANSWER, extraction, fact, memory
from serve_app.text import CONTEXT_OPEN
from tests.e2e.test_extraction import settled, wait_for

pytestmark = pytest.mark.e2e


def test_chat_proxy_turns_become_searchable_memories(service, api, keys, fake_llm, uid):
    fake_llm.add_rule(
        f"cello-{uid}",
        extraction(
            [memory(f"The user plays the cello-{uid} in a community orchestra", "fact")],
            [fact("preference", "instrument", "cello")],
        ),
    )
    before = len(fake_llm.calls("extract"))
    client = openai.OpenAI(base_url=f"{service.base_url}/v1", api_key=keys.service, max_retries=0)
    questions = [
        "hello there",
        "can you help me practise?",
        "what should I warm up with?",
        f"I play the cello-{uid} in a community orchestra",
    ]
    for i, question in enumerate(questions):
        out = client.chat.completions.create(
            model="fake",
            messages=[{"role": "user", "content": question}],
            user=uid,
            extra_headers={"X-Memserve-Session": "chat-x"},
            stream=i == 1,  # a streamed answer is recorded too
        )
        if i != 1:
            assert out.choices[0].message.content == DEFAULT_CHAT_ANSWER
        else:
            assert "".join(c.choices[0].delta.content or "" for c in out if c.choices)

    deadline = time.monotonic() + 30
    results: list[dict] = []
    while time.monotonic() < deadline:
        r = api.post("/v1/search", json={"user_id": uid, "query": "which instrument?"})
        results = r.json()["results"]
        if results:
            break
        time.sleep(0.2)
    assert results, f"no memory extracted from the chat turns:\n{service.tail(20)}"
    assert results[0]["content"] == f"The user plays the cello-{uid} in a community orchestra"
    assert results[0]["source"] == "extraction" and results[0]["session_id"] == "chat-x"
    # The batch's turns are stamped after its memories and facts are written (a replica lost
    # in between leaves them claimable, not lost), so the stamp may trail the search hit by
    # a moment; once it is there, so is everything the batch wrote.
    status = wait_for(lambda: settled(api, uid, "chat-x"), what="the batch's turns stamped")
    assert status["turns"] == 8 and status["pending_turns"] == 0  # 4 questions, 4 answers
    facts = api.get("/v1/facts", params={"user_id": uid}).json()["facts"]
    assert [(f["key"], f["value"]) for f in facts] == [("instrument", "cello")]
    sent = [c for c in fake_llm.calls("extract")[before:] if uid in str(c["messages"])]
    prompt = str(sent[-1]["messages"])
    assert "hello there" in prompt and DEFAULT_CHAT_ANSWER in prompt  # the recorded turns
    assert CONTEXT_OPEN not in prompt  # the injected memory block is not re-extracted
