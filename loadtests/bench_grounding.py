"""Grounded extraction (issue 29 item 5): stale values a model writes, with and without the check.

The knowledge-update scenarios (``loadtests/knowledge_scenarios.py``: users who move,
change jobs, diets and partners, plan and cancel a trip over four dated sessions) are
played through the extraction pipeline in process (embedded Postgres, the real encoder,
no Ray) in two arms side by side: with the grounding check (``extract.ground``) and
without it, each on its own user ids with the same conversations, session by session
(each user's session in both arms before the next user). The LLM is either the scripted
``good`` model of the knowledge-update benchmark (it only writes what the turns say, so
every item the check drops there is a false drop) or any OpenAI-compatible server, such
as the small local model of ``../shared/llm`` (start it per its README first; it
answers at temperature 0). Its answers are memoised by prompt (``--memo`` keeps them in
a JSON-lines file), so both arms get the very same answer until the check first drops
something and only the check differs; a rerun asks the model only what it has not seen.
``--seed-sessions N`` has the scripted good model extract the first N sessions (the
first shows no known block, so the check cannot act there): the slow model's calls go to
the sessions where it can.

Per arm (totals, per attribute, per user):
- ``stale_writes``: items (memories, fact versions) a session wrote that carry a value
  of an attribute that was no longer true on that session's day (and not the new one),
  e.g. "diet = vegetarian" written the day the user said "pescatarian now";
- ``stale_live``: live memories and active facts at the end carrying a value that is no
  longer true;
- ``new_written``: of the values the user gave in a session, those an item of that
  session names (what a false drop would cost);
- ``ungrounded``: items the check dropped, each classified: ``stale_drop`` (an old
  value), ``false_drop`` (a value the user gave that day), ``other`` (a restated
  current value);
- ``paired``: per user, without minus with the check (mean, standard error, counts).

    python -m loadtests.bench_grounding --scripted --users 6
    python -m loadtests.bench_grounding --llm-url http://127.0.0.1:8790/v1 --users 6 \
        --seed-sessions 2 --sessions 3 --memo loadtests/results/grounding-memo-qwen1.5b.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.grounding_judge import classify, new_in, paired, stale_in, summary
from loadtests.harness import write_json
from loadtests.knowledge_scenarios import DATES, QUESTIONS, ScriptedModel, User, make_user
from models import load_encoder
from serve_app.db.embedded import EmbeddedPostgres
from serve_app.db.migrations import migrate
from serve_app.db.pool import open_pool
from serve_app.extraction.pipeline import ExtractionPipeline
from serve_app.llm.client import LLMClient
from serve_app.metrics import ExtractionMetrics
from serve_app.settings import Settings
from serve_app.store.records import live, valid
from serve_app.store.turns import SessionKey, TurnStore
from serve_app.store.vectors import ensure_table
from serve_app.testing.llm_server import FakeLLM

TENANT = "bench"
SLUG = "all-minilm-l6-v2-int8"  # the default encoder, as the extraction tests load it


class Drops(logging.Handler):
    """The items the pipeline dropped as ungrounded (its log line), in order."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.items: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("extraction dropped an ungrounded"):
            kind, value = record.args  # type: ignore[misc]
            self.items.append((str(kind), str(value)))


class MemoLLM(LLMClient):
    """The client, answering a prompt it has answered before from memory (and from
    ``path``, a JSON-lines file kept across runs): both arms send the same prompts until
    the check first drops something, so both get the very same answers there and only
    the check differs; the slow local model runs each prompt once, and a rerun (after
    a change of the check) asks it only the prompts it has not seen."""

    answers: dict[str, str] = {}
    path: Path | None = None
    calls = 0
    hits = 0

    @classmethod
    def load(cls, path: Path | None) -> None:
        cls.path = path
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line)
                cls.answers[row["key"]] = row["answer"]

    @staticmethod
    def key(system: str, user: str) -> str:
        return hashlib.sha256(f"{system}\x00{user}".encode()).hexdigest()

    async def complete_json(self, system: str, user: str, **options: Any) -> str:
        """``options``: the client's own (``tag``, ``max_tokens``), passed through."""
        k = self.key(system, user)
        if k in self.answers:
            MemoLLM.hits += 1
            return self.answers[k]
        t0 = time.perf_counter()
        answer = await super().complete_json(system, user, **options)
        MemoLLM.calls += 1
        print(f"  llm call {MemoLLM.calls}: {time.perf_counter() - t0:.0f} s", flush=True)
        self.answers[k] = answer
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({"key": k, "answer": answer}) + "\n")
        return answer


@dataclass
class Arm:
    """One variant of the run: its own pipeline (the check on or off) and user prefix."""

    name: str
    prefix: str
    pool: Any
    pipeline: ExtractionPipeline
    llm: MemoLLM
    seeder: ExtractionPipeline | None = None  # the scripted good model, first sessions
    users: list[dict[str, Any]] = field(default_factory=list)


async def play(
    arm: Arm, u: User, i: int, row: dict[str, Any], drops: Drops, seeded: int = 0
) -> None:
    """User ``u``'s session ``i`` (its earlier ones are extracted; the first ``seeded``
    by the arm's seeder): what it saved and dropped (classified) is added to ``row``."""
    key = SessionKey(TENANT, arm.prefix + u.user_id, f"s{i}")
    msgs, when = [], []
    for j, st in enumerate(u.sessions[i]):
        at = DATES[i] + timedelta(minutes=2 * j)
        msgs += [("user", st.turn), ("assistant", "Thanks for telling me!")]
        when += [at, at]
    await TurnStore(arm.pool).append(key, msgs, agent_id=None, ttl_hours=24.0, occurred_at=when)
    t0 = time.perf_counter()
    drops.items.clear()
    pipeline = arm.seeder if arm.seeder is not None and i < seeded else arm.pipeline
    out = await pipeline.process_session(key)  # not ended: no summary call
    print(
        f"{arm.prefix}{u.user_id} s{i}: saved {out.saved} facts {out.facts}"
        f" ungrounded {out.ungrounded} error {out.error}"
        f" ({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    row["ungrounded"] += out.ungrounded
    row["failed_batches"] += int(out.error is not None)
    row["saved"] += out.saved
    row["facts"] += sum(n for k, n in out.facts.items() if k in ("added", "replaced"))
    row["dropped"] += [
        {"session": i, "kind": kind, "value": value, "class": classify(u, value, i)}
        for kind, value in drops.items
    ]


async def judge(pool: Any, u: User, prefix: str, sessions: int) -> dict[str, Any]:
    """Per attribute: stale writes (an item a session wrote with a value no longer true
    that day), stale live values at the end, and the new values each session wrote."""
    per = {a: {"stale_writes": 0, "stale_live": 0, "new": 0, "new_written": 0} for a in QUESTIONS}
    samples: list[dict[str, Any]] = []
    uid = prefix + u.user_id
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT session_id, content AS text, (" + live() + " AND " + valid() + ") AS now"
            " FROM memory_items WHERE tenant_id = %s AND user_id = %s"
            " UNION ALL SELECT session_id, key || ' = ' || value, active FROM facts"
            " WHERE tenant_id = %s AND user_id = %s",
            (TENANT, uid, TENANT, uid),
        )
        rows = await cur.fetchall()
    written: dict[int, str] = {}
    for row in rows:
        session = int(str(row["session_id"] or "s0")[1:])
        written[session] = written.get(session, "") + "\n" + row["text"].lower()
        for a in stale_in(u, row["text"], session):
            per[a]["stale_writes"] += 1
            samples.append({"session": session, "text": row["text"]})
        if row["now"]:
            for a in stale_in(u, row["text"], sessions - 1):
                per[a]["stale_live"] += 1
                samples.append({"live": True, "text": row["text"]})
    for i in range(sessions):
        for a, value in new_in(u, i).items():
            per[a]["new"] += 1
            per[a]["new_written"] += int(any(v in written.get(i, "") for v in value))
    totals = {k: sum(p[k] for p in per.values()) for k in next(iter(per.values()))}
    return {**totals, "by_attribute": per, "stale_samples": samples[:6]}


async def run(
    dsn: str,
    slug: str,
    settings: Settings,
    embed: Any,
    users: Sequence[User],
    budget_s: float,
    seed: tuple[int, str | None, int] = (0, None, len(DATES)),
) -> dict[str, Any]:
    """Session by session, each user's session in both arms one after the other (a run
    cut by ``budget_s`` has every user paired, over its first sessions), then the
    per-arm totals and the paired differences. ``seed``: (n, url, last) the first n sessions
    are extracted by the scripted good model at url (no known block is shown in the
    first one, so the check cannot act there: the slow model's calls go where it can),
    and sessions from ``last`` on are not played."""
    drops = Drops()
    logging.getLogger("serve_app.extraction.pipeline").addHandler(drops)
    logging.getLogger("serve_app.extraction.pipeline").setLevel(logging.INFO)
    arms = []
    for ground in (True, False):
        s = settings.with_(extract={"ground": ground})
        pool = await open_pool(dsn, s, min_size=1)
        llm = MemoLLM(s.llm)
        pipeline = ExtractionPipeline(pool, slug, embed, llm, s, metrics=ExtractionMetrics())
        name = "with_check" if ground else "without_check"
        arm = Arm(name, "on-" if ground else "off-", pool, pipeline, llm)
        if seed[1] is not None:
            scripted = s.with_(llm={"base_url": seed[1], "model": "scripted"})
            arm.seeder = ExtractionPipeline(
                pool, slug, embed, LLMClient(scripted.llm), scripted, metrics=ExtractionMetrics()
            )
        arms.append(arm)
    started = time.perf_counter()
    sessions = 0
    try:
        rows = {
            (arm.name, u.user_id): {
                "user": u.user_id,
                "ungrounded": 0,
                "failed_batches": 0,
                "saved": 0,
                "facts": 0,
                "dropped": [],
            }
            for arm in arms
            for u in users
        }
        last = 0.0  # the last round's seconds: a round that would overrun is not started
        for i in range(
            min(seed[2], len(DATES))
        ):  # session-major: the model's prompt cache keeps the
            if time.perf_counter() - started + last > budget_s:  # system prompt
                print(f"budget of {budget_s:.0f} s: sessions {i}.. not run", flush=True)
                break
            sessions = i + 1
            t0 = time.perf_counter()
            for u in users:
                for arm in arms:
                    await play(arm, u, i, rows[arm.name, u.user_id], drops, seed[0])
            last = time.perf_counter() - t0
        for arm in arms:
            for u in users:
                judged = await judge(arm.pool, u, arm.prefix, sessions)
                arm.users.append({**rows[arm.name, u.user_id], **judged})
    finally:
        for arm in arms:
            await arm.llm.close()
            if arm.seeder is not None and arm.seeder.llm is not None:
                await arm.seeder.llm.close()
            await arm.pool.close()
    on, off = arms[0].users, arms[1].users
    return {
        "with_check": summary(on),
        "without_check": summary(off),
        "paired": {m: paired(on, off, m) for m in ("stale_live", "stale_writes", "new_written")},
        "users_run": len(on),
        "sessions_run": sessions,
        "per_user": {"with_check": on, "without_check": off},
        "llm_calls": MemoLLM.calls,
        "memo_hits": MemoLLM.hits,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=2)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--scripted", action="store_true", help="the scripted good model")
    ap.add_argument("--llm-url", default="http://127.0.0.1:8790/v1")
    ap.add_argument("--llm-model", default="local")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--max-tokens", type=int, default=512, help="per LLM answer")
    ap.add_argument("--memo", type=Path, help="JSON lines of LLM answers by prompt, kept")
    ap.add_argument(
        "--seed-sessions",
        type=int,
        default=0,
        help="sessions extracted by the scripted good model first",
    )
    ap.add_argument("--sessions", type=int, default=len(DATES), help="play the first N only")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=float("inf"),
        help="start no further user after this many seconds",
    )
    args = ap.parse_args()
    rng = random.Random(args.seed)
    users = [
        make_user(f"kg-g{n:02d}{rng.randrange(10**4):04d}", "good", rng) for n in range(args.users)
    ]
    fake = None
    url = args.llm_url
    if args.scripted or args.seed_sessions:
        fake = FakeLLM().start()
        fake.add_responder(ScriptedModel(users, seed=args.seed))
    if args.scripted:
        url = fake.url
    MemoLLM.load(args.memo)
    settings = Settings().with_(
        llm={
            "base_url": url,
            "model": "scripted" if fake else args.llm_model,
            "api_key": "x",
            "timeout_s": args.timeout_s,
            "max_retries": 1,
            "max_tokens": args.max_tokens,
        },
        extract={"compress_every_m_turns": 10_000, "retry_backoff_s": 0.0},
    )
    encoder = load_encoder(SLUG, threads=1)

    async def embed(texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        return await asyncio.to_thread(encoder.encode, list(texts), is_query=is_query)

    with tempfile.TemporaryDirectory(prefix="memserve-ground-") as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        dsn = pg.start()
        try:
            migrate(dsn)
            slug = encoder.spec.table_slug
            ensure_table(dsn, slug, encoder.spec.dim)
            seed = (args.seed_sessions, fake.url if fake else None, args.sessions)
            result = asyncio.run(run(dsn, slug, settings, embed, users, args.budget_s, seed))
        finally:
            pg.stop()
            if fake is not None:
                fake.stop()
    for name in ("with_check", "without_check"):
        print(name, json.dumps(result[name]), flush=True)
    llm = "scripted good model" if args.scripted else f"{url} ({args.llm_model})"
    result["config"] = {
        "users": args.users,
        "seed": args.seed,
        "sessions_per_user": len(DATES),
        "llm": llm,
        "temperature": 0,
        "memo": str(args.memo) if args.memo else None,
        "max_tokens": args.max_tokens,
        "seed_sessions_scripted": args.seed_sessions,
        "sessions": args.sessions,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "per_user"}, indent=2))
    name = "bench_grounding" + ("-scripted" if args.scripted else "-llm")
    print(f"wrote {write_json(name, result)}")


if __name__ == "__main__":
    main()
