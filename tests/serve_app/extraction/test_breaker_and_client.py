"""Circuit breaker and the LLM client against the scripted server."""

from __future__ import annotations

import logging

import pytest

from serve_app.extraction.breaker import CircuitBreaker, CircuitOpen
from serve_app.extraction.llm import LLMClient, LLMUnavailable
from serve_app.settings import LLMSettings


def test_breaker_opens_half_opens_and_closes():
    now = [0.0]
    b = CircuitBreaker(failures=2, reset_s=10, clock=lambda: now[0])
    b.before_call()
    b.failure()
    assert b.state == "closed"
    b.failure()
    assert b.state == "open"
    with pytest.raises(CircuitOpen):
        b.before_call()
    now[0] = 11
    assert b.state == "half-open"
    b.before_call()  # the one trial call
    with pytest.raises(CircuitOpen):
        b.before_call()
    b.failure()  # trial failed: open again
    assert b.state == "open"
    now[0] = 22
    b.before_call()
    b.success()
    assert b.state == "closed"


def client(fake, **kw) -> LLMClient:
    cfg = dict(timeout_s=0.5, max_retries=2, backoff_s=0.01, breaker_failures=2,
               breaker_reset_s=60)  # fmt: skip
    cfg.update(kw)
    return LLMClient(LLMSettings(base_url=fake.url, model="fake", api_key="k", **cfg))


async def test_json_mode_request_and_answer(fake_llm):
    fake_llm.add_rule("hello", '{"ok": true}', kind="chat")
    llm = client(fake_llm)
    assert await llm.complete_json("sys", "hello") == '{"ok": true}'
    [req] = fake_llm.calls()
    assert req["messages"][0] == {"role": "system", "content": "sys"}
    await llm.close()


@pytest.mark.parametrize(("mode", "kind"), [("http500", "http_5xx"), ("delay", "timeout")])
async def test_failures_are_retried_then_reported(fake_llm, mode, kind):
    fake_llm.set_mode(mode, delay_s=1.0)
    llm = client(fake_llm)
    with pytest.raises(LLMUnavailable) as err:
        await llm.complete_json("sys", "x")
    assert err.value.kind == kind
    assert len(fake_llm.calls()) == 3  # 1 + 2 retries
    await llm.close()


async def test_down_opens_breaker_then_fails_fast(fake_llm):
    fake_llm.down()
    llm = client(fake_llm, max_retries=0)
    for _ in range(2):
        with pytest.raises(LLMUnavailable) as err:
            await llm.complete_json("sys", "x")
        assert err.value.kind == "connect"
    assert llm.breaker.state == "open"
    fake_llm.up()
    with pytest.raises(LLMUnavailable) as err:
        await llm.complete_json("sys", "x")
    assert err.value.kind == "circuit_open" and fake_llm.calls() == []
    await llm.close()


async def test_an_upstream_error_text_is_logged_not_carried(fake_llm, caplog):
    """The error reaches API callers (dead letters); the upstream's text, which can name
    the operator's account, only the log."""
    leak = "Incorrect API key provided: sk-proj-ab12****wxyz for organization org-AcmeSecret"
    fake_llm.add_rule("x", "", kind="chat", status=401, message=leak)
    llm = client(fake_llm, max_retries=0)
    with (
        caplog.at_level(logging.WARNING, logger="serve_app.extraction.llm"),
        pytest.raises(LLMUnavailable) as err,
    ):
        await llm.complete_json("sys", "x")
    assert err.value.kind == "http_4xx" and str(err.value) == "LLM answered HTTP 401"
    assert any(leak in r.getMessage() for r in caplog.records)
    await llm.close()
