"""Grounded extraction (issue 29 item 5): stale values a model writes, with and without the check.

The knowledge-update scenarios (``loadtests/knowledge_scenarios.py``: users who move,
change jobs, diets and partners, plan and cancel a trip over four dated sessions) are
played through the extraction pipeline in process (embedded Postgres, the real encoder,
no Ray), twice: with the grounding check (``extract.ground``) and without it, each on
its own users with the same conversations. The LLM is either the scripted ``good``
model of the knowledge-update benchmark (it only writes what the turns say, so every
item the check drops there is a false drop) or any OpenAI-compatible server, such as
the small local model of ``../shared/llm`` (start it per its README first).

Per variant:
- ``stale_writes``: items (memories, fact versions) a session wrote that carry a value
  of an attribute that was no longer true on that session's day (and not the new one),
  e.g. "diet = vegetarian" written the day the user said "pescatarian now";
- ``stale_live``: live memories and active facts at the end carrying a value that is no
  longer true;
- ``ungrounded``: items the check dropped (the scripted run: false drops);
- items stored, extraction calls, failed batches, wall time.

    python -m loadtests.bench_grounding --scripted --users 6
    python -m loadtests.bench_grounding --llm-url http://127.0.0.1:8790/v1 --users 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.harness import write_json
from loadtests.knowledge_scenarios import DATES, ScriptedModel, User, make_user
from models import load_encoder
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.extraction.llm import LLMClient
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.metrics import ExtractionMetrics
from serve_app.settings import Settings
from serve_app.store.records import live, valid
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from tests.fakes.llm_server import FakeLLM

TENANT = "bench"
SLUG = "all-minilm-l6-v2-int8"  # the default encoder, as the extraction tests load it
# How the scenario's memory text names each attribute's value (knowledge_scenarios.make_user).
_VALUE = {
    "city": ("lives in ", None),
    "job": (" at ", None),
    "diet": ("follows a ", " diet"),
    "partner": ("dating ", None),
    "plan": ("trip to ", " on "),
}


def marker(attribute: str, memory: str | None) -> str | None:
    """The value an attribute's scenario memory names ("Paris-1234", "vegetarian")."""
    if memory is None:
        return None
    start, end = _VALUE[attribute]
    value = memory.split(start, 1)[1]
    return (value.split(end, 1)[0] if end else value).strip().lower()


def stale_in(u: User, text: str, session: int) -> list[str]:
    """The attributes ``text`` states a no-longer-true value of, on session ``session``'s day."""
    day = DATES[session]
    low = text.lower()
    out = []
    for attribute, timeline in u.timeline.items():
        current = marker(attribute, u.at(attribute, day))
        old = {marker(attribute, m) for start, m in timeline if start <= day and m is not None}
        old.discard(current)
        if attribute == "plan" and "cancel" in low:
            continue
        if any(o and o in low for o in old) and not (current and current in low):
            out.append(attribute)
    return out


async def play(
    pipeline: ExtractionPipeline, turns: TurnStore, users: Sequence[User], prefix: str
) -> dict[str, Any]:
    """Every user's sessions in date order, each extracted before the next starts."""
    totals = {"ungrounded": 0, "failed_batches": 0, "saved": 0, "merged": 0, "facts": 0}
    for u in users:
        for i, session in enumerate(u.sessions):
            key = SessionKey(TENANT, prefix + u.user_id, f"s{i}")
            msgs, when = [], []
            for j, st in enumerate(session):
                at = DATES[i] + timedelta(minutes=2 * j)
                msgs += [("user", st.turn), ("assistant", "Thanks for telling me!")]
                when += [at, at]
            await turns.append(key, msgs, agent_id=None, ttl_hours=24.0, occurred_at=when)
            t0 = time.perf_counter()
            out = await pipeline.process_session(key)  # not ended: no summary call
            print(f"{prefix}{u.user_id} s{i}: saved {out.saved} facts {out.facts}"
                  f" ungrounded {out.ungrounded} error {out.error}"
                  f" ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
            totals["ungrounded"] += out.ungrounded
            totals["failed_batches"] += int(out.error is not None)
            totals["saved"] += out.saved
            totals["merged"] += out.merged
            totals["facts"] += sum(n for k, n in out.facts.items() if k in ("added", "replaced"))
    return totals


async def judge(pool: Any, users: Sequence[User], prefix: str) -> dict[str, Any]:
    """Stale writes per session and stale live values at the end, with samples."""
    writes, live_stale, samples = 0, 0, []
    async with pool.connection() as conn:
        for u in users:
            uid = prefix + u.user_id
            cur = await conn.execute(
                "SELECT session_id, content AS text, (" + live() + " AND " + valid() + ") AS now"
                " FROM memory_items WHERE tenant_id = %s AND user_id = %s"
                " UNION ALL SELECT session_id, key || ' = ' || value, active FROM facts"
                " WHERE tenant_id = %s AND user_id = %s",
                (TENANT, uid, TENANT, uid),
            )
            for row in await cur.fetchall():
                session = int(str(row["session_id"] or "s0")[1:])
                if stale_in(u, row["text"], session):
                    writes += 1
                    samples.append({"session": session, "text": row["text"]})
                if row["now"] and stale_in(u, row["text"], len(DATES) - 1):
                    live_stale += 1
                    samples.append({"live": True, "text": row["text"]})
    return {"stale_writes": writes, "stale_live": live_stale, "stale_samples": samples[:12]}


class MemoLLM(LLMClient):
    """The client, answering a prompt it has answered before from memory: both variants
    send the same prompts until the check first drops something (a temperature-0 model
    answers them the same), so the slow local model runs each prompt once."""

    answers: dict[tuple[str, str], str] = {}
    calls = 0

    async def complete_json(self, system: str, user: str, **options: Any) -> str:
        """``options``: the client's own (``tag``, ``max_tokens``), passed through."""
        if (system, user) not in self.answers:
            MemoLLM.calls += 1
            self.answers[(system, user)] = await super().complete_json(system, user, **options)
        return self.answers[(system, user)]


async def variant(
    dsn: str, slug: str, settings: Settings, embed: Any, users: Sequence[User], ground: bool
) -> dict[str, Any]:
    s = settings.with_(extract={"ground": ground})
    pool = await open_pool(dsn, s, min_size=1)
    llm = MemoLLM(s.llm)
    metrics = ExtractionMetrics()
    pipeline = ExtractionPipeline(pool, slug, embed, llm, s, metrics=metrics)
    prefix = "on-" if ground else "off-"
    try:
        started = time.perf_counter()
        totals = await play(pipeline, TurnStore(pool), users, prefix)
        wall = time.perf_counter() - started
        judged = await judge(pool, users, prefix)
    finally:
        await llm.close()
        await pool.close()
    return {**totals, **judged, "extraction_calls": metrics.counts["attempts"],
            "llm_calls_so_far": MemoLLM.calls, "wall_s": round(wall, 1)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=2)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--scripted", action="store_true", help="the scripted good model")
    ap.add_argument("--llm-url", default="http://127.0.0.1:8790/v1")
    ap.add_argument("--llm-model", default="local")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--max-tokens", type=int, default=512, help="per LLM answer")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    users = [make_user(f"kg-g{n:02d}{rng.randrange(10**4):04d}", "good", rng)
             for n in range(args.users)]  # fmt: skip
    fake = None
    url = args.llm_url
    if args.scripted:
        fake = FakeLLM().start()
        fake.add_responder(ScriptedModel(users, seed=args.seed))
        url = fake.url
    settings = Settings().with_(
        llm={"base_url": url, "model": "scripted" if fake else args.llm_model,
             "api_key": "x", "timeout_s": args.timeout_s, "max_retries": 1,
             "max_tokens": args.max_tokens},
        extract={"compress_every_m_turns": 10_000, "retry_backoff_s": 0.0},
    )  # fmt: skip
    encoder = load_encoder(SLUG, threads=1)

    async def embed(texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="memserve-ground-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            slug = encoder.spec.table_slug
            ensure_table(dsn, slug, encoder.spec.dim)
            for ground in (True, False):
                name = "with_check" if ground else "without_check"
                result[name] = asyncio.run(variant(dsn, slug, settings, embed, users, ground))
                print(name, json.dumps(result[name]), flush=True)
        finally:
            pg.stop()
            if fake is not None:
                fake.stop()
    llm = "scripted good model" if fake else f"{url} ({args.llm_model})"
    result["config"] = {
        "users": args.users, "seed": args.seed, "sessions_per_user": len(DATES), "llm": llm,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    print(f"wrote {write_json('bench_grounding' + ('-scripted' if fake else '-llm'), result)}")


if __name__ == "__main__":
    main()
