"""Circuit breaker and the LLM client against the scripted server."""

from __future__ import annotations

import logging

import pytest

from serve_app.extraction.parser import SUMMARY_SCHEMA
from serve_app.llm.breaker import CircuitBreaker, CircuitOpen
from serve_app.llm.client import LLMClient, LLMUnavailable
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
    cfg = dict(
        model="fake",
        timeout_s=0.5,
        max_retries=2,
        backoff_s=0.01,
        breaker_failures=2,
        breaker_reset_s=60,
    )
    cfg.update(kw)
    return LLMClient(LLMSettings(base_url=fake.url, api_key="k", **cfg))


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
        caplog.at_level(logging.WARNING, logger="serve_app.llm.client"),
        pytest.raises(LLMUnavailable) as err,
    ):
        await llm.complete_json("sys", "x")
    assert err.value.kind == "http_4xx" and str(err.value) == "LLM answered HTTP 401"
    assert any(leak in r.getMessage() for r in caplog.records)
    await llm.close()


def model_name(request: pytest.FixtureRequest) -> str:
    """A model name of this test alone: the strict format is remembered per endpoint and
    model for the whole process, and the scripted server is shared by the session."""
    return f"fake-{request.node.name}"


async def test_strict_schema_is_sent_when_given(fake_llm, request):
    fake_llm.add_rule("hello", '{"summary": "ok"}', kind="chat")
    llm = client(fake_llm, model=model_name(request))
    assert llm.answer_format(SUMMARY_SCHEMA) == "json_schema"
    await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    await llm.complete_json("sys", "hello")  # no schema: loose JSON
    first, second = (c["body"]["response_format"] for c in fake_llm.calls())
    assert first == SUMMARY_SCHEMA.response_format()
    assert second == {"type": "json_object"}
    await llm.close()


async def test_json_object_setting_never_sends_a_schema(fake_llm, request):
    fake_llm.add_rule("hello", '{"summary": "ok"}', kind="chat")
    llm = client(fake_llm, model=model_name(request), response_format="json_object")
    assert llm.answer_format(SUMMARY_SCHEMA) == "json_object"
    await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    [call] = fake_llm.calls()
    assert call["body"]["response_format"] == {"type": "json_object"}
    await llm.close()


async def test_an_endpoint_refusing_the_schema_falls_back_once_and_is_remembered(fake_llm, request):
    fake_llm.add_rule("hello", '{"summary": "ok"}', kind="chat")
    fake_llm.refuse_schema()
    llm = client(fake_llm, model=model_name(request))
    assert await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA) == '{"summary": "ok"}'
    formats = [c["body"]["response_format"]["type"] for c in fake_llm.calls()]
    assert formats == ["json_schema", "json_object"]  # refused once, then loose JSON
    assert llm.breaker.state == "closed"  # a refused format is not an outage
    # Remembered for the endpoint: this client and a new one of the same endpoint ask in
    # json_object straight away.
    other = client(fake_llm, model=model_name(request))
    assert other.answer_format(SUMMARY_SCHEMA) == "json_object"
    await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    await other.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    formats = [c["body"]["response_format"]["type"] for c in fake_llm.calls()]
    assert formats == ["json_schema", "json_object", "json_object", "json_object"]
    # Another model on the same server has not been seen refusing it.
    assert (
        client(fake_llm, model=f"{model_name(request)}-b").answer_format(SUMMARY_SCHEMA)
        == "json_schema"
    )
    await llm.close()
    await other.close()


async def test_a_400_after_the_schema_was_accepted_is_not_retried_loose(fake_llm, request):
    """Once an endpoint took the strict format, a 400 is about something else (a prompt
    too long): no second call, and the endpoint is not marked as refusing the schema."""
    fake_llm.add_rule("hello", '{"summary": "ok"}', kind="chat")
    llm = client(fake_llm, model=model_name(request))
    await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    fake_llm.limit_prompt(3)
    with pytest.raises(LLMUnavailable) as err:
        await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    assert err.value.kind == "http_4xx" and err.value.status == 400
    assert len(fake_llm.calls()) == 2
    assert llm.answer_format(SUMMARY_SCHEMA) == "json_schema"
    await llm.close()


async def test_a_request_refused_in_both_formats_is_not_remembered(fake_llm, request):
    fake_llm.limit_prompt(3)  # every request is a 400, whatever its format
    llm = client(fake_llm, model=model_name(request))
    with pytest.raises(LLMUnavailable) as err:
        await llm.complete_json("sys", "hello", schema=SUMMARY_SCHEMA)
    assert err.value.status == 400
    formats = [c["body"]["response_format"]["type"] for c in fake_llm.calls()]
    assert formats == ["json_schema", "json_object"]
    # The loose retry failed the same way: the format was not the reason.
    assert llm.answer_format(SUMMARY_SCHEMA) == "json_schema"
    await llm.close()
