"""A session forget reaches the ``infer`` jobs of that session (POST /v1/memories with
infer: true queues a one-turn job under ``infer-<hex>`` whose memories carry the caller's
session from ``meta.session_id``): pending ones are deleted, one in flight writes nothing.
Real database, real encoder, the scripted LLM."""

from __future__ import annotations

import asyncio

from serve_app.extraction.pipeline import INFER_PREFIX
from serve_app.store.forget import ForgetStore, Scope
from serve_app.store.turns import SessionKey
from serve_app.testing.llm_server import extraction, memory
from tests.serve_app.extraction.conftest import test_settings as settings_for

T = "t1"
OBOE = "The user plays the oboe"


def job(user: str, name: str) -> SessionKey:
    return SessionKey(T, user, f"{INFER_PREFIX}{name}")


async def queue(h, key: SessionKey, session: str | None, instrument: str = "oboe") -> None:
    await h.say(key, ("user", f"I play the {instrument}"), meta={"session_id": session})
    await h.turns.end(key)


async def test_a_pending_infer_job_of_the_session_is_forgotten_with_it(
    make_harness, fake_llm, encoder
):
    h = await make_harness(settings_for(fake_llm.url))
    for instrument in ("oboe", "cello", "harp"):
        fake_llm.add_rule(
            f"I play the {instrument}", extraction([memory(f"The user plays the {instrument}")])
        )
    forgets = ForgetStore(h.pool, encoder.spec.table_slug)
    mine, other, bare = job("ivy", "a1"), job("ivy", "b2"), job("ivy", "c3")
    await queue(h, mine, "s1")
    await queue(h, other, "s2", "cello")
    await queue(h, bare, None, "harp")

    counts = await forgets.forget(Scope(T, "ivy", session_id="s1"))
    assert counts["turns"] == 1
    for key in (mine, other, bare):
        await h.pipeline.process_session(key, force=True)
    rows = await h.memories("ivy")
    # s1's job went with s1; s2's and the session-less job's memories stay
    assert sorted((r["session_id"] or "", r["content"]) for r in rows) == [
        ("", "The user plays the harp"),
        ("s2", "The user plays the cello"),
    ], rows
    assert await h.rows("SELECT id FROM session_turns WHERE session_id = %s", mine.session_id) == []


async def test_an_infer_job_in_flight_writes_nothing_after_its_session_is_forgotten(
    make_harness, fake_llm, encoder
):
    h = await make_harness(settings_for(fake_llm.url))
    forgets = ForgetStore(h.pool, encoder.spec.table_slug)
    loop = asyncio.get_running_loop()
    forgot: list[dict] = []

    def on_request(kind: str, messages: list[dict]) -> None:  # while the model thinks
        if kind == "extract" and not forgot:
            forget = forgets.forget(Scope(T, "joe", session_id="s1"))
            forgot.append(asyncio.run_coroutine_threadsafe(forget, loop).result(30))

    fake_llm.on_request = on_request
    fake_llm.add_rule("oboe", extraction([memory(OBOE)]))
    key = job("joe", "d4")
    await queue(h, key, "s1")
    out = await h.pipeline.process_session(key, force=True)
    assert forgot and out.error is None  # the forget ran while the model answered
    assert await h.memories("joe") == []
