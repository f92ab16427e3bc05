"""Every background LLM call metered per tenant, end user and purpose; budgets defer.

Real PostgreSQL, the real encoder and the scripted LLM, which counts what it served
(``FakeLLM.served``) the way a provider bills it. Two pipelines on one database
stand for two Extractor replicas.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from datetime import UTC, datetime, time, timedelta

import pytest

from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.llm.client import LLMUnavailable
from serve_app.services.sessions import SessionService
from serve_app.spend.estimate import request_tokens
from serve_app.store.llm_spend import CallTag, Limits, OverBudget
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for


async def usage(h, purpose: str | None = None) -> dict[str, int]:
    [row] = await h.rows(
        "SELECT count(*) AS n_rows, coalesce(sum(calls), 0)::int AS calls,"
        " coalesce(sum(prompt_tokens), 0)::int AS prompt_tokens,"
        " coalesce(sum(completion_tokens), 0)::int AS completion_tokens,"
        " coalesce(sum(estimated_calls), 0)::int AS estimated"
        " FROM llm_usage_daily WHERE %s::text IS NULL OR purpose = %s",
        purpose,
        purpose,
    )
    return row


def fixed(budgets: dict[str, dict[str, Limits]]):
    """Budgets per tenant from a dict the test changes (as a tenant settings change)."""

    async def read(tenant: str) -> dict[str, Limits]:
        return budgets.get(tenant, {})

    return read


@pytest.mark.parametrize("reported", [True, False], ids=["usage", "no-usage"])
async def test_per_purpose_totals_equal_what_the_llm_served(make_harness, fake_llm, reported):
    fake_llm.set_usage(reported)
    fake_llm.add_rule("violin", extraction([memory("The user plays the violin")]))
    settings = settings_for(fake_llm.url)
    a = await make_harness(settings, spend=True)  # two replicas on one database
    b = await make_harness(settings, spend=True)
    keys = [
        SessionKey(t, f"u{i}", f"s{j}")
        for t in ("acme", "globex")
        for i in range(3)
        for j in range(2)
    ]
    keys.append(SessionKey("acme", "u0", f"{INFER_PREFIX}job1"))
    for k in keys:
        await a.say(
            k,
            ("user", f"I play the violin, says {k.user_id}"),
            ("assistant", "Nice."),
            ("user", f"Also {k.session_id} is my favourite session"),
        )
    runs = [(a if i % 2 else b).pipeline.process_session(k, force=True) for i, k in enumerate(keys)]
    outcomes = await asyncio.gather(*runs)
    assert all(o.error is None for o in outcomes) and sum(o.summaries for o in outcomes) > 0

    served_extract = fake_llm.served("extract")
    metered = await usage(a, "extract")
    infer = await usage(a, "infer")
    assert infer["calls"] == 1
    for field in ("calls", "prompt_tokens", "completion_tokens"):
        assert metered[field] + infer[field] == served_extract[field], field
    summaries = await usage(a, "summarize")
    for field in ("calls", "prompt_tokens", "completion_tokens"):
        assert summaries[field] == fake_llm.served("summary")[field], field
    total = await usage(a)
    assert total["estimated"] == (0 if reported else total["calls"])
    # Per end user: each user's calls under its own (tenant, user) rows.
    rows = await a.rows(
        "SELECT tenant_id, user_id, sum(calls)::int AS calls FROM llm_usage_daily"
        " GROUP BY 1, 2 ORDER BY 1, 2"
    )
    per = {(r["tenant_id"], r["user_id"]): r["calls"] for r in rows}
    assert set(per) == {(t, f"u{i}") for t in ("acme", "globex") for i in range(3)}
    assert per[("acme", "u0")] > per[("acme", "u1")]  # the infer job is u0's
    open_ = await a.rows("SELECT count(*) AS n FROM llm_calls WHERE finished_at IS NULL")
    assert open_[0]["n"] == 0


async def test_a_replica_dying_mid_call_is_still_counted_once(make_harness, fake_llm):
    """The task holding the call is cancelled while the LLM answers (the replica dies
    between the call and the write): its intent stays open; the reconciler closes it
    at its reservation; the next replica extracts the turns and is counted too."""
    settings = settings_for(fake_llm.url, llm={"timeout_s": 10.0}, lease_s=0.5)
    a = await make_harness(settings, spend=True)
    b = await make_harness(settings, spend=True)
    key = SessionKey("acme", "u1", "s1")
    await a.say(key, ("user", "I play the oboe in a quintet"))
    fake_llm.set_mode("delay", delay_s=1.0)
    run = asyncio.create_task(a.pipeline.process_session(key))
    while not fake_llm.calls("extract"):
        await asyncio.sleep(0.02)
    run.cancel()  # the replica is gone; the LLM still answers (and bills) the call
    with pytest.raises(asyncio.CancelledError):
        await run
    fake_llm.set_mode("ok")
    await asyncio.sleep(1.2)  # the served answer lands; the dead claim runs out
    assert (await b.pipeline.process_session(key)).turns_extracted == 1
    assert (await usage(a))["calls"] == 1  # only the finished call so far
    assert await b.pipeline.meter.store.reconcile(stale_s=0) == 1
    assert await b.pipeline.meter.store.reconcile(stale_s=0) == 0  # closed once
    served, metered = fake_llm.served("extract"), await usage(a, "extract")
    assert served["calls"] == metered["calls"] == 2
    assert metered["prompt_tokens"] == served["prompt_tokens"]
    # the lost call's completion is counted at its cap: never less than was billed
    assert metered["completion_tokens"] >= served["completion_tokens"]
    [lost] = await a.rows("SELECT * FROM llm_calls WHERE outcome = 'lost'")
    x = settings.extract  # counted at its max_tokens (sized from the one-turn batch)
    assert (
        lost["estimated"]
        and lost["completion_tokens"] == x.answer_tokens_base + x.answer_tokens_per_turn
    )
    assert lost["completion_tokens"] == lost["reserved"] - lost["est_prompt"]


async def test_over_budget_defers_then_extracts_after_a_raise(make_harness, fake_llm):
    fake_llm.add_rule("violin", extraction([memory("The user plays the violin")]))
    budgets: dict[str, dict[str, Limits]] = {"acme": {"background": Limits(tenant_daily=1)}}
    settings = settings_for(fake_llm.url)
    h = await make_harness(settings, spend=fixed(budgets))
    first, later = SessionKey("acme", "u1", "s1"), SessionKey("acme", "u2", "s1")
    other = SessionKey("globex", "u1", "s1")
    for k in (first, later, other):
        await h.say(k, ("user", "I play the violin"), ("user", "every day"))
    # Budget 1 token: the first call is admitted (under the budget), then it is spent.
    assert (await h.pipeline.process_session(first)).turns_extracted == 2
    deferred = await h.pipeline.process_session(later)
    assert deferred.turns_extracted == 0 and deferred.deferred is not None
    assert deferred.error is None
    # Nothing lost, nothing dead-lettered, no attempt counted, nothing claimed.
    rows = await h.rows(
        "SELECT extracted_at, dead_at, extract_attempts, claimed_until FROM session_turns"
        " WHERE tenant_id = 'acme' AND user_id = 'u2'"
    )
    assert len(rows) == 2 and all(
        r["extracted_at"] is None
        and r["dead_at"] is None
        and r["extract_attempts"] == 0
        and r["claimed_until"] is None
        for r in rows
    )
    # The session status says so, with when it resumes (the next UTC midnight).
    trigger = ExtractionTrigger(None, enabled=True, every_n=2)
    sessions = SessionService(h.turns, trigger, turn_ttl_hours=1, spend=h.pipeline.meter)
    status = await sessions.status(later.owner, "s1")
    assert status["deferred"] == "budget" and status["pending_turns"] == 2
    assert status["resumes_at"].isoformat() == deferred.deferred
    assert status["resumes_at"].hour == 0 and status["resumes_at"].minute == 0
    # Another tenant is not held up.
    assert (await h.pipeline.process_session(other)).turns_extracted == 2
    # The scan still lists the deferred session; after a raise it is extracted.
    assert later in await h.pipeline.scan()
    budgets["acme"] = {"background": Limits(tenant_daily=10**9)}
    assert (await h.pipeline.process_session(later)).turns_extracted == 2
    assert "deferred" not in await sessions.status(later.owner, "s1")
    dead = await h.rows("SELECT count(*) AS n FROM session_turns WHERE dead_at IS NOT NULL")
    assert dead[0]["n"] == 0
    assert len(await h.memories("u2")) == 1


async def test_a_summary_held_back_by_the_budget_runs_after_a_raise(make_harness, fake_llm):
    """An ended session whose turns were all extracted before the budget ran out: its
    summary is deferred, the scan keeps listing it (no unextracted turn is left, so it
    used to drop out for good), and after a raise the summary is written."""
    fake_llm.add_rule("kayak", extraction([memory("The user kayaks on weekends")]))
    fake_llm.add_rule("Turns 1-2", '{"summary": "The user talked about kayaking."}', kind="summary")
    budgets: dict[str, dict[str, Limits]] = {"acme": {"background": Limits(tenant_daily=10**9)}}
    h = await make_harness(settings_for(fake_llm.url), spend=fixed(budgets))
    key = SessionKey("acme", "u1", "s1")
    await h.say(key, ("user", "I kayak on weekends"), ("user", "mostly on the river"))
    assert (await h.pipeline.process_session(key)).turns_extracted == 2
    budgets["acme"] = {"background": Limits(tenant_daily=1)}  # spent by the extraction
    await h.turns.end(key)
    held = await h.pipeline.process_session(key)
    assert held.summaries == 0 and held.deferred is not None
    assert key in await h.pipeline.scan()  # still due: its summary is owed
    pending = SessionKey("acme", "u2", "s1")  # turns to extract go before owed summaries
    await h.say(pending, ("user", "hello"))
    await h.turns.end(pending)
    assert (await h.pipeline.scan())[:2] == [pending, key]
    budgets["acme"] = {"background": Limits(tenant_daily=10**9)}
    [due] = [k for k in await h.pipeline.scan() if k == key]
    assert (await h.pipeline.process_session(due)).summaries == 1
    assert [m["content"] for m in await h.memories("u1", "summary")] == [
        "The user talked about kayaking."
    ]
    assert key not in await h.pipeline.scan()  # summarised: no longer due


async def test_a_user_budget_defers_only_that_user(make_harness, fake_llm):
    budgets = {"acme": {"background": Limits(user_daily=1)}}
    h = await make_harness(settings_for(fake_llm.url), spend=fixed(budgets))
    u1a, u1b, u2 = (
        SessionKey("acme", "u1", "a"),
        SessionKey("acme", "u1", "b"),
        SessionKey("acme", "u2", "a"),
    )
    for k in (u1a, u1b, u2):
        await h.say(k, ("user", "I like tea"), ("user", "green tea"))
    assert (await h.pipeline.process_session(u1a)).turns_extracted == 2
    assert (await h.pipeline.process_session(u1b)).deferred is not None
    assert (await h.pipeline.process_session(u2)).turns_extracted == 2


async def test_concurrent_replicas_overshoot_by_at_most_one_call(make_harness, fake_llm):
    """Eight replicas start calls of one tenant at once against a budget: admission is
    serialised in PostgreSQL, so the counted use passes the budget by at most the one
    call admitted just under it (each call reserves prompt + max_tokens)."""
    budget = 5000
    budgets = {"acme": {"background": Limits(tenant_daily=budget)}}
    settings = settings_for(fake_llm.url, llm={"max_tokens": 200})
    replicas = [await make_harness(settings, spend=fixed(budgets)) for _ in range(8)]
    keys = [SessionKey("acme", f"u{i}", "s") for i in range(40)]
    for k in keys:
        await replicas[0].say(k, ("user", f"I collect stamps number {k.user_id}"))
    outcomes = await asyncio.gather(
        *[replicas[i % 8].pipeline.process_session(k) for i, k in enumerate(keys)]
    )
    done = sum(o.turns_extracted for o in outcomes)
    assert 0 < done < len(keys) and sum(o.deferred is not None for o in outcomes) > 0
    [row] = await replicas[0].rows(
        "SELECT sum(prompt_tokens + completion_tokens)::int AS used,"
        " max(reserved)::int AS one_call FROM llm_calls"
    )
    assert row["used"] <= budget + row["one_call"], row
    print(
        f"\nbudget {budget}: used {row['used']} (overshoot {max(0, row['used'] - budget)},"
        f" bound {row['one_call']}), {done}/{len(keys)} extracted"
    )


async def test_soft_threshold_alerts_once_per_window(make_harness, fake_llm, caplog):
    budgets = {"acme": {"background": Limits(tenant_daily=400)}}
    settings = settings_for(fake_llm.url, llm={"max_tokens": 100})
    a = await make_harness(settings, spend=fixed(budgets))
    b = await make_harness(settings, spend=fixed(budgets))
    for i in range(4):
        await a.say(SessionKey("acme", f"u{i}", "s"), ("user", "I like tea"))
    with caplog.at_level("WARNING", logger="serve_app.spend.meter"):
        for i in range(4):
            await (a, b)[i % 2].pipeline.process_session(SessionKey("acme", f"u{i}", "s"))
    alerts = [r for r in caplog.records if "threshold" in r.getMessage()]
    assert len(alerts) == 1, [r.getMessage() for r in alerts]
    rows = await a.rows("SELECT scope FROM llm_budget_alerts")
    assert [r["scope"] for r in rows] == ["tenant_daily"]
    counts: dict[str, int] = defaultdict(int)
    for h in (a, b):
        for k, v in h.pipeline.meter.metrics.counts.items():
            counts[k] += v
    assert counts["budget_soft_background"] == 1


async def test_failed_calls_are_metered_by_what_they_may_have_cost(make_harness, fake_llm):
    """An error answer costs nothing; a timed-out request counts at its reservation
    (the provider may have billed it); a call the open breaker never sent leaves no row."""
    settings = settings_for(fake_llm.url, llm={"max_retries": 0, "timeout_s": 0.3})
    h = await make_harness(settings, spend=True)
    llm = h.pipeline.llm
    tag = CallTag("acme", "u1", "extract")
    fake_llm.set_mode("http500")
    with pytest.raises(LLMUnavailable):
        await llm.complete_json("system", "user text", tag=tag, max_tokens=50)
    fake_llm.set_mode("delay", delay_s=1.0)
    with pytest.raises(LLMUnavailable):
        await llm.complete_json("system", "user text", tag=tag, max_tokens=50)
    llm.breaker.failure()
    llm.breaker.failure()  # three failures in a row: the breaker is open
    with pytest.raises(LLMUnavailable, match="circuit|open"):
        await llm.complete_json("system", "user text", tag=tag, max_tokens=50)
    rows = await h.rows(
        "SELECT outcome, prompt_tokens, completion_tokens, estimated FROM llm_calls ORDER BY id"
    )
    # the estimate counts the whole request, as the provider bills it (schema included)
    est = request_tokens(fake_llm.calls()[-1]["body"])
    assert [tuple(r.values()) for r in rows] == [
        ("http_5xx", 0, 0, False),
        ("timeout", est, 50, True),
    ]
    [day] = await h.rows("SELECT calls, errors, estimated_calls FROM llm_usage_daily")
    assert (day["calls"], day["errors"], day["estimated_calls"]) == (2, 2, 1)


async def test_deferred_work_resumes_when_the_window_rolls_over(make_harness, fake_llm):
    budgets = {"acme": {"background": Limits(tenant_daily=1)}}
    h = await make_harness(settings_for(fake_llm.url), spend=fixed(budgets))
    meter = h.pipeline.meter
    today = datetime.now(UTC)
    meter.clock = lambda: today  # the meter's injected clock: UTC day windows
    first, later = SessionKey("acme", "u1", "s1"), SessionKey("acme", "u2", "s1")
    for k in (first, later):
        await h.say(k, ("user", "I like green tea"))
    assert (await h.pipeline.process_session(first)).turns_extracted == 1
    deferred = await h.pipeline.process_session(later)
    assert (
        deferred.deferred
        == datetime.combine(today.date() + timedelta(days=1), time(), UTC).isoformat()
    )
    meter.clock = lambda: today + timedelta(days=1)  # the next UTC day: a fresh window
    assert (await h.pipeline.process_session(later)).turns_extracted == 1
    days = await h.rows("SELECT day, sum(calls)::int AS n FROM llm_usage_daily GROUP BY day")
    assert sorted(r["n"] for r in days) == [1, 1] and len(days) == 2


async def test_a_timed_out_attempt_and_its_retry_are_both_counted(make_harness, fake_llm):
    """The provider answers (and bills) a request the client gave up on, then the retry:
    each attempt has its own intent, so the timed-out one is counted too (at its
    reservation: its answer never arrived), not only the retry that succeeded."""
    settings = settings_for(fake_llm.url, llm={"max_retries": 1, "timeout_s": 0.3})
    h = await make_harness(settings, spend=True)
    slow = iter([0.8])  # the first request is answered after the client's timeout

    def hold(kind, messages) -> None:
        threading.Event().wait(next(slow, 0.0))

    fake_llm.on_request = hold
    tag = CallTag("acme", "u1", "extract")
    assert await h.pipeline.llm.complete_json("system", "user text", tag=tag, max_tokens=50)
    while fake_llm.served()["calls"] < 2:  # the abandoned request is served late
        await asyncio.sleep(0.05)
    first, retry = (c["usage"] for c in fake_llm.calls())
    rows = await h.rows(
        "SELECT outcome, prompt_tokens, completion_tokens, estimated FROM llm_calls ORDER BY id"
    )
    # the estimate counts the whole request, as the provider bills it (schema included)
    est = request_tokens(fake_llm.calls()[-1]["body"])
    assert est == first["prompt_tokens"]
    assert [tuple(r.values()) for r in rows] == [
        ("timeout", est, 50, True),  # 50 >= what it was billed for
        ("ok", retry["prompt_tokens"], retry["completion_tokens"], False),
    ]
    assert first["completion_tokens"] <= 50
    [day] = await h.rows("SELECT calls, errors, estimated_calls FROM llm_usage_daily")
    assert (day["calls"], day["errors"], day["estimated_calls"]) == (2, 1, 1)


async def test_a_retry_over_budget_is_not_sent(make_harness, fake_llm):
    """A retry is admitted like a call: the timed-out attempt spent the budget, so the
    retry raises OverBudget (the caller defers) and the breaker counts the failure."""
    budgets = {"acme": {"background": Limits(tenant_daily=1)}}
    settings = settings_for(fake_llm.url, llm={"max_retries": 2, "timeout_s": 0.3})
    h = await make_harness(settings, spend=fixed(budgets))
    llm = h.pipeline.llm
    fake_llm.set_mode("delay", delay_s=0.6)
    with pytest.raises(OverBudget):
        await llm.complete_json(
            "system", "user text", tag=CallTag("acme", "u1", "extract"), max_tokens=50
        )
    while fake_llm.served()["calls"] < 1:  # let the abandoned request finish
        await asyncio.sleep(0.05)
    rows = await h.rows("SELECT outcome FROM llm_calls ORDER BY id")
    assert [r["outcome"] for r in rows] == ["timeout"] and len(fake_llm.calls()) == 1
    llm.breaker.failure()
    llm.breaker.failure()  # with the retried call's: three in a row
    assert llm.breaker.state == "open"
