"""ExtractionTrigger.run_now: mem0's synchronous add waits a bounded time for the outcome."""

from __future__ import annotations

import asyncio

from serve_app.extraction.trigger import ExtractionTrigger
from serve_app.store.turns import SessionKey

KEY = SessionKey("t1", "u1", "infer-abc")


async def test_run_now_answers_the_outcome_or_none_after_the_timeout_without_cancelling():
    finished: list[str] = []

    async def run(tenant: str, user: str, session: str, force: bool) -> dict:
        await asyncio.sleep(0.3 if session.endswith("slow") else 0)
        finished.append(session)
        return {"turns_extracted": 1, "events": [{"event": "ADD"}], "force": force}

    trigger = ExtractionTrigger(None, enabled=True, every_n=1, run=run)
    got = await trigger.run_now(KEY, 5)
    assert got == {"turns_extracted": 1, "events": [{"event": "ADD"}], "force": True}
    slow = SessionKey("t1", "u1", "infer-slow")
    assert await trigger.run_now(slow, 0.05) is None  # too slow: the caller answers PENDING
    await asyncio.sleep(0.4)
    assert finished == ["infer-abc", "infer-slow"]  # the slow run was not cancelled


async def test_run_now_without_a_runner_fires_the_session_and_a_failure_is_none():
    fired: list[tuple] = []

    async def submit(*args) -> None:
        fired.append(args)

    trigger = ExtractionTrigger(submit, enabled=True, every_n=1)
    assert await trigger.run_now(KEY, 1) is None
    await asyncio.sleep(0)
    assert fired == [("t1", "u1", "infer-abc", True)]

    async def broken(*args) -> dict:
        raise ConnectionError("extractor gone")

    assert (
        await ExtractionTrigger(None, enabled=True, every_n=1, run=broken).run_now(KEY, 1) is None
    )
